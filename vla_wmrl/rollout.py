"""Run seeded episodes over a vector environment, refilling each worker with the next seed as soon as it finishes.

This is the one place real (simulator or robot) episodes are executed: demonstration collection, evaluation and
WMRL's anchor groups all go through :func:`run_episodes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np


class RolloutPolicy(Protocol):
    """What :func:`run_episodes` needs from a policy: batched actions and per-worker episode resets.

    A policy may also expose ``last_log_prob``: the (num_envs,) log-probabilities of the actions its last ``act``
    returned (None when it does not record them). Each frame then keeps its action's as ``action.log_prob``."""

    def act(self, obs: dict, info: dict) -> np.ndarray:
        """Actions (num_envs, action_dim) for a batched observation and info dict."""

    def reset(self, mask: np.ndarray, episodes: np.ndarray) -> None:
        """Forget per-episode state of the workers where ``mask`` is True (they start a new episode).

        ``episodes[i]`` is the index, in the order the episodes were requested (``run_episodes``' seeds), of the
        episode worker ``i`` starts, -1 where it starts none. Which worker runs an episode, and when, depends on the
        number of workers and on when earlier episodes ended; the index does not, so per-episode state keyed by it
        (e.g. the seed of the action noise) makes each episode independent of both."""


@dataclass
class Episode:
    """One finished episode. ``frames[t]`` holds observation t, action t and what followed it (LeRobot layout)."""

    seed: int
    index: int = -1  # position in the requested seeds (see RolloutPolicy.reset)
    frames: list[dict] = field(default_factory=list)
    success: bool = False
    unstable: bool = False

    @property
    def length(self) -> int:
        return len(self.frames)

    @property
    def ret(self) -> float:
        return float(sum(f["next.reward"] for f in self.frames))


def index_batch(tree, i: int):
    """Element ``i`` of a batched observation/info tree (dicts of arrays or tuples); drops gymnasium's ``_`` masks."""
    if isinstance(tree, dict):
        return {k: index_batch(v, i) for k, v in tree.items() if not k.startswith("_")}
    return tree[i]


def run_episodes(envs, policy: RolloutPolicy, seeds: list[int], max_steps: int | list[int] | None = None
                 ) -> Iterator[Episode]:
    """Run one episode per seed over ``envs`` (autoreset disabled) and yield each as it finishes.

    Args:
        envs: a gymnasium vector env made by :func:`sims.make_vector_env`.
        policy: batched policy (see :class:`RolloutPolicy`).
        seeds: one reset seed per episode; episodes run ``num_envs`` at a time.
        max_steps: end an episode after this many steps, as if the environment's horizon were this (None: the
            environment's own horizon). One set of workers then serves several horizons. A list gives one limit per
            seed (e.g. replays that only need as many steps as the imagined rollout they check).

    Yields:
        Finished :class:`Episode` objects, in completion order.
    """
    n, queue = envs.num_envs, list(enumerate(seeds))
    limits = [max_steps] * len(seeds) if max_steps is None or np.ndim(max_steps) == 0 else list(max_steps)
    if len(limits) != len(seeds):
        raise ValueError(f"run_episodes: {len(limits)} max_steps for {len(seeds)} seeds")
    slots: list[Episode | None] = [None] * n

    def start(mask: np.ndarray, obs=None, info=None):
        seed_list, started, index = [None] * n, np.zeros(n, bool), np.full(n, -1)
        for i in np.flatnonzero(mask):
            if queue:  # else an idle worker: reset, stepped along, never recorded, unknown to the policy
                k, seed = queue.pop(0)
                slots[i] = Episode(seed=int(seed), index=k)
                seed_list[i], started[i], index[i] = slots[i].seed, True, k
        new_obs, new_info = envs.reset(seed=seed_list, options={"reset_mask": mask})
        policy.reset(started, index)
        return new_obs, new_info

    # Every worker starts from a reset, idle ones too: a vector env whose workers were never reset fails a partial
    # reset (fewer seeds than workers on fresh workers, e.g. a 1-episode evaluation in the trainer's two workers).
    obs, info = start(np.ones(n, bool))
    while any(s is not None for s in slots):
        actions = np.asarray(policy.act(obs, info), dtype=np.float32)
        log_prob = getattr(policy, "last_log_prob", None)
        next_obs, reward, terminated, truncated, next_info = envs.step(actions)
        done = np.logical_or(terminated, truncated)
        restart = np.zeros(n, dtype=bool)
        for i, ep in enumerate(slots):
            if ep is None:
                continue
            frame = index_batch(obs, i)
            limit = limits[ep.index]
            end = bool(done[i]) or (limit is not None and ep.length + 1 >= limit)
            frame.update({"action": actions[i], "next.reward": float(reward[i]), "next.done": end,
                          "next.success": bool(next_info["is_success"][i])})
            if log_prob is not None:
                frame["action.log_prob"] = float(log_prob[i])
            ep.frames.append(frame)
            if end:
                ep.success = bool(next_info["is_success"][i])
                ep.unstable = bool(next_info["sim_unstable"][i])
                slots[i] = None
                # Refill the worker; with no seeds left it idles, reset anyway: a synchronous vector env refuses to
                # step a finished sub-environment that was not reset.
                restart[i] = True
                yield ep
        obs, info = next_obs, next_info
        if restart.any():
            reset_obs, reset_info = start(restart)
            obs, info = _merge(obs, reset_obs, restart), _merge(info, reset_info, restart)


def _merge(old, new, mask: np.ndarray):
    """Take ``new`` where ``mask`` is True, ``old`` elsewhere, through nested dicts/arrays/tuples."""
    if isinstance(old, dict):
        return {k: _merge(old[k], new[k], mask) if k in new else old[k] for k in old}
    if isinstance(old, tuple):
        return tuple(b if m else a for a, b, m in zip(old, new, mask))
    out = np.array(old, copy=True)
    out[mask] = np.asarray(new)[mask]
    return out


class ReplayPolicy:
    """Plays fixed action sequences: episode ``k`` (the k-th of :func:`run_episodes`' seeds) plays ``sequences[k]``,
    then holds its last action.

    Pass the seeds in the order of the sequences. Episodes finish in completion order: ``Episode.index`` says which
    sequence each played. With a seeded,
    deterministic simulator this reproduces recorded episodes and gives the true outcome of imagined action
    sequences (``benchmarks/imagination_fidelity.py``).
    """

    def __init__(self, sequences: list[np.ndarray], num_envs: int):
        if not sequences or any(len(q) == 0 for q in sequences):
            raise ValueError("ReplayPolicy needs at least one sequence, and no empty sequence")
        self.sequences = sequences
        self.slot, self.t = [0] * num_envs, np.zeros(num_envs, int)

    def reset(self, mask: np.ndarray, episodes: np.ndarray) -> None:
        for i in np.flatnonzero(mask):
            if not 0 <= episodes[i] < len(self.sequences):
                raise RuntimeError(f"ReplayPolicy: episode {episodes[i] + 1} started but only {len(self.sequences)} "
                                   f"sequences were given")
            self.slot[i], self.t[i] = int(episodes[i]), 0

    def act(self, obs: dict, info: dict) -> np.ndarray:
        out = [self.sequences[k][min(t, len(self.sequences[k]) - 1)] for k, t in zip(self.slot, self.t)]
        self.t += 1
        return np.stack(out).astype(np.float32)


class ExpertPolicy:
    """Batched wrapper over one scripted expert per worker (see ``sims.experts``).

    Args:
        sim: registered sim name.
        num_envs: number of workers.
        noise: action-noise standard deviation of a noisy episode.
        noisy_fraction: probability that an episode is noisy (drawn per episode).
        seed: seed of the noise draws.
    """

    def __init__(self, sim: str, num_envs: int, noise: float = 0.0, noisy_fraction: float = 1.0, seed: int = 0):
        from sims.experts import make_expert

        self.rng = np.random.default_rng(seed)
        self.noise, self.noisy_fraction = noise, noisy_fraction
        self.experts = [make_expert(sim, seed=seed + 1000 * i) for i in range(num_envs)]

    def reset(self, mask: np.ndarray, episodes: np.ndarray | None = None) -> None:
        for i in np.flatnonzero(mask):
            self.experts[i].reset()
            self.experts[i].noise = self.noise if self.rng.random() < self.noisy_fraction else 0.0

    def act(self, obs: dict, info: dict) -> np.ndarray:
        return np.stack([ex.act(index_batch(info["privileged"], i)) for i, ex in enumerate(self.experts)])
