"""Rollout groups for WMRL: imagined in the world model, or executed for real, collected into one step buffer.

A *group* is ``G`` rollouts of the current policy from one start state. Imagined groups start from the real first
frame of a seeded simulator reset; real (anchor) groups reset the simulator with the same seed, so both start from the
identical state. Every real rollout is also replayed open-loop in the world model (first real frame + its real
actions), which gives the (predicted score, real outcome) pairs the calibrator learns from.

A rollout's score is the world model's predicted success probability at its last step (``score="final"``: success
ends an episode, so it is judged at the terminal state), or the highest along it (``score="max"``); its variance is
the ensemble's score variance at that step. ``max`` is biased upwards for long rollouts -- failures run to the
horizon and collect the most chances of a spurious peak -- and on the policy's own real Lift rollouts, replayed in
the world model, it scored failures 0.14 on average against 1e-5 for ``final``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from vla_wmrl.rollout import Episode


@dataclass
class Rollout:
    """One rollout's steps and scores. Images (T, H, W, 3) uint8 per camera; state (T, D); action (T, A)."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    action: np.ndarray
    task: str
    pred_score: float = float("nan")
    pred_var: float = float("nan")
    real_success: float = float("nan")   # NaN for imagined rollouts
    frames_imagined: list[np.ndarray] = field(default_factory=list)  # first camera, for videos
    log_prob: np.ndarray | None = None   # (T,) the rollout policy's log-probability of each action, when recorded

    @property
    def length(self) -> int:
        return len(self.action)


def start_observations(env, seeds: list[int]) -> dict:
    """Batched first observations of seeded resets of a single (in-process) environment."""
    obs = [env.reset(seed=int(s))[0] for s in seeds]
    return {k: (tuple(o[k] for o in obs) if k == "task" else np.stack([o[k] for o in obs])) for k in obs[0]}


def observations_at(rollouts: list["Rollout"], steps: list[int]) -> dict:
    """Batched observation of each rollout at its step (images, state and instruction), as an env returns it."""
    keys = list(rollouts[0].images)
    obs = {k: np.stack([r.images[k][t] for r, t in zip(rollouts, steps)]) for k in keys}
    obs["observation.state"] = np.stack([r.state[t] for r, t in zip(rollouts, steps)])
    obs["task"] = tuple(r.task for r in rollouts)
    return obs


def repeat_obs(obs: dict, times: int) -> dict:
    """Repeat each entry of a batched observation ``times`` times in a row (B -> B * times)."""
    return {k: (tuple(t for t in v for _ in range(times)) if k == "task" else np.repeat(v, times, axis=0))
            for k, v in obs.items()}


SCORES = ("final", "max")


def _pick(probs: np.ndarray, lengths: np.ndarray, score: str) -> np.ndarray:
    """Index of the scored step per rollout: (T, B) probabilities (-1 past a rollout's end) -> (B,)."""
    if score == "final":
        return np.maximum(lengths - 1, 0)
    if score == "max":
        return probs.argmax(axis=0)
    raise ValueError(f"unknown rollout score {score!r}; valid: {list(SCORES)}")


@torch.no_grad()
def imagine(imagined_env, adapter, start_obs: dict, horizon: int, score: str = "final") -> list[Rollout]:
    """Roll the policy out in the world model from each start observation until success or ``horizon``.

    Args:
        imagined_env: a ``world_models.ImaginedVectorEnv``.
        adapter: the policy as a batched rollout policy (``act(obs, info)``, ``reset(mask, episodes)``).
        start_obs: batched real start observations (B entries).
        horizon: maximum steps.
        score: ``final`` or ``max`` (see the module docstring).
    """
    obs, info = imagined_env.reset(start_obs)
    n = len(obs["task"])
    adapter.reset(np.ones(n, bool), np.arange(n))
    image_keys = [k for k in obs if k.startswith("observation.images.")]
    steps = {k: [] for k in [*image_keys, "observation.state", "action"]}
    log_probs = []  # stays empty unless the adapter records them (RolloutAdapter(record_log_prob=True))
    alive_hist, probs, vars_ = [], [], []
    alive = np.ones(n, bool)
    for _ in range(horizon):
        action = adapter.act(obs, info)
        for k in image_keys + ["observation.state"]:
            steps[k].append(np.asarray(obs[k]))
        steps["action"].append(action)
        if getattr(adapter, "last_log_prob", None) is not None:
            log_probs.append(adapter.last_log_prob)
        alive_hist.append(alive.copy())
        obs, _, terminated, truncated, info = imagined_env.step(action)
        probs.append(np.where(alive, info["success_prob"], -1.0))
        vars_.append(info["score_var"])
        alive &= ~(np.asarray(terminated) | np.asarray(truncated))
        if not alive.any():
            break
    probs, vars_, alive_hist = np.stack(probs), np.stack(vars_), np.stack(alive_hist)  # (T, B)
    stacked = {k: np.stack(v, axis=1) for k, v in steps.items()}  # (B, T, ...)
    best = _pick(probs, alive_hist.sum(axis=0), score)
    log_probs = np.stack(log_probs, axis=1) if len(log_probs) == len(alive_hist) else None  # (B, T)
    out = []
    for i in range(n):
        T = int(alive_hist[:, i].sum())
        out.append(Rollout(images={k: stacked[k][i, :T] for k in image_keys}, state=stacked["observation.state"][i, :T],
                           action=stacked["action"][i, :T], task=str(start_obs["task"][i]),
                           pred_score=float(probs[best[i], i]), pred_var=float(vars_[best[i], i]),
                           log_prob=None if log_probs is None else log_probs[i, :T]))
    return out


def from_episode(ep: Episode, image_keys: list[str]) -> Rollout:
    """A real episode as a rollout (its outcome is the simulator's success flag)."""
    return Rollout(images={k: np.stack([f[k] for f in ep.frames]) for k in image_keys},
                   state=np.stack([f["observation.state"] for f in ep.frames]),
                   action=np.stack([f["action"] for f in ep.frames]), task=str(ep.frames[0]["task"]),
                   real_success=float(ep.success),
                   log_prob=(np.array([f["action.log_prob"] for f in ep.frames], np.float32)
                             if all("action.log_prob" in f for f in ep.frames) else None))


@torch.no_grad()
def score_in_world_model(imagined_env, rollouts: list[Rollout], score: str = "final") -> None:
    """Replay real rollouts open-loop in the world model (first real frame + the real actions) and store its
    predicted score and variance on each, in place. Frames of the replay are kept for side-by-side videos."""
    if not rollouts:
        return
    keys = list(rollouts[0].images)
    imagined_env.reset(observations_at(rollouts, [0] * len(rollouts)))
    T = max(r.length for r in rollouts)
    lengths = np.array([r.length for r in rollouts])
    probs, vars_, frames = [], [], []
    for t in range(T):
        action = np.stack([r.action[min(t, r.length - 1)] for r in rollouts])
        obs, _, _, _, info = imagined_env.step(action)
        probs.append(np.where(t < lengths, info["success_prob"], -1.0))
        vars_.append(np.asarray(info["score_var"]))
        frames.append(obs[keys[0]])
    probs, vars_ = np.stack(probs), np.stack(vars_)
    best = _pick(probs, lengths, score)
    for i, r in enumerate(rollouts):
        r.pred_score, r.pred_var = float(probs[best[i], i]), float(vars_[best[i], i])
        r.frames_imagined = [f[i] for f in frames[: r.length]]


def step_batch(rollouts: list[Rollout]) -> tuple[dict, np.ndarray]:
    """Concatenate every step of ``rollouts`` into one batch (uint8 images kept compact) and the rollout index of
    each step. When every rollout recorded its log-probabilities, the batch carries them as ``old_log_prob`` (the
    GRPO ratio's denominator, then not recomputed)."""
    keys = list(rollouts[0].images)
    batch = {k: torch.from_numpy(np.concatenate([r.images[k] for r in rollouts])) for k in keys}
    batch["observation.state"] = torch.from_numpy(np.concatenate([r.state for r in rollouts])).float()
    batch["action"] = torch.from_numpy(np.concatenate([r.action for r in rollouts])).float()
    batch["task"] = [r.task for r in rollouts for _ in range(r.length)]
    if all(r.log_prob is not None for r in rollouts):
        batch["old_log_prob"] = torch.from_numpy(np.concatenate([r.log_prob for r in rollouts])).float()
    index = np.concatenate([np.full(r.length, i) for i, r in enumerate(rollouts)])
    return batch, index


def to_policy_batch(batch: dict) -> dict:
    """uint8 (N, H, W, 3) images -> float (N, 3, H, W) in [0, 1]; the rest as is."""
    return {k: (v.permute(0, 3, 1, 2).float().div_(255.0) if k.startswith("observation.images.") else v)
            for k, v in batch.items()}


__all__ = ["Rollout", "from_episode", "imagine", "observations_at", "repeat_obs", "score_in_world_model",
           "start_observations", "step_batch", "to_policy_batch"]
