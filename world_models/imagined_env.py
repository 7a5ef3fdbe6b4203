"""A world model wrapped as a batched environment with the simulators' vector-env contract.

RL in imagination reads exactly like RL in the simulator (``sims.make_vector_env``, autoreset disabled)::

    obs, info = envs.reset(seed=seeds)                      # real start observations from the simulator
    imagined = ImaginedVectorEnv(model, horizon=100)
    obs, info = imagined.reset(obs)                         # start from those real frames
    obs, reward, terminated, truncated, info = imagined.step(actions)   # info["score_var"], info["success_prob"]

Everything between ``reset`` and the returned observation is batched tensor work on the model's device; only the
conversion of the returned observation to numpy (``return_numpy=True``, matching the simulators) leaves torch.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from world_models.base import WorldModel

STATE_KEY = "observation.state"


class ImaginedVectorEnv:
    """Batched imagined environment over a :class:`~world_models.base.WorldModel`.

    Observations have the simulator's keys: one ``observation.images.<cam>`` (B, H, W, 3) uint8 per camera the model
    was trained on, ``observation.state`` (B, D) float32, and ``task`` (copied from the start observation).

    Step results: ``reward`` (B,) the model's predicted reward; ``terminated`` (B,) the predicted success probability
    exceeds ``success_threshold``; ``truncated`` (B,) ``horizon`` steps since reset; ``info`` carries
    ``success_prob`` (B,), ``score_var`` (B,) (the model's predictive variance of the score, see its docstring) and
    ``is_success`` (= terminated). Like the simulators' vector envs (autoreset disabled), finished sub-environments
    keep stepping until the caller resets them with ``options={"reset_mask": mask}``.

    Args:
        model: a trained world model (put in eval mode here).
        start_obs: default start observations for :meth:`reset` (a batched observation dict).
        horizon: steps before truncation (the simulator's horizon).
        success_threshold: success probability above which an episode terminates; the model's config by default.
        seed: seed of the sampling noise (stochastic models); ``reset(seed=...)`` reseeds.
        return_numpy: return numpy observations like the simulators (True) or torch tensors on the model's device.
    """

    def __init__(self, model: WorldModel, start_obs: dict | None = None, horizon: int = 100,
                 success_threshold: float | None = None, seed: int = 0, return_numpy: bool = True):
        self.model = model.eval()
        cfg = model.cfg
        self.image_keys, self.horizon, self.return_numpy = list(cfg.image_keys), horizon, return_numpy
        self.success_threshold = cfg.success_threshold if success_threshold is None else success_threshold
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (cfg.action_dim,), np.float32)
        size = (cfg.image_size, cfg.image_size, 3)
        spaces = {k: gym.spaces.Box(0, 255, size, np.uint8) for k in self.image_keys}
        spaces[STATE_KEY] = gym.spaces.Box(-np.inf, np.inf, (cfg.state_dim,), np.float32)
        self.single_observation_space = gym.spaces.Dict(spaces)
        self._start, self.num_envs = start_obs, 0
        self._frames = self._states = self._t = None  # (B, T, C, H, W), (B, T, D), (B,)
        self._task = None

    # ---------------------------------------------------------------------------------------------------------- #
    def _to_frames(self, obs: dict) -> torch.Tensor:
        """Camera images of a batched observation -> (B, C, H, W) float in [0, 1], cameras stacked on channels."""
        missing = [k for k in self.image_keys if k not in obs]
        if missing:
            raise KeyError(f"start observation lacks camera(s) {missing} the world model was trained on; "
                           f"it has {sorted(obs)}")
        ims = [torch.as_tensor(np.asarray(obs[k]) if not torch.is_tensor(obs[k]) else obs[k]) for k in self.image_keys]
        x = torch.cat([im.to(self.device) for im in ims], dim=-1)  # (B, H, W, C)
        if x.ndim != 4 or x.shape[1] != self.model.cfg.image_size:
            raise ValueError(f"start images have shape {tuple(x.shape)}; the world model expects batches of "
                             f"({self.model.cfg.image_size}, {self.model.cfg.image_size}, 3) per camera")
        return x.permute(0, 3, 1, 2).float() / 255.0

    def reset(self, obs: dict | None = None, *, seed: int | list | None = None, options: dict | None = None):
        """Start (or restart, where ``options["reset_mask"]`` is True) imagined episodes from real observations.

        Args:
            obs: batched observation dict (the simulator's, or frames from a dataset); the constructor's
                ``start_obs`` when None. A single real frame fills the whole context, as at an episode's start.
            seed: reseeds the sampling noise (an int, or a list whose first int is used).
            options: ``{"reset_mask": (B,) bool}`` restarts only those sub-environments.

        Returns:
            (observation, info) with zero ``success_prob`` and ``score_var``.
        """
        obs = self._start if obs is None else obs
        if obs is None:
            raise ValueError("reset needs start observations (pass obs, or start_obs to the constructor)")
        if isinstance(seed, (list, tuple, np.ndarray)):
            seed = next((int(s) for s in seed if s is not None), None)
        if seed is not None:
            self.generator.manual_seed(int(seed))
        T = self.model.cfg.context
        frames = self._to_frames(obs)[:, None].repeat(1, T, 1, 1, 1)  # (B, T, C, H, W)
        states = torch.as_tensor(np.asarray(obs[STATE_KEY]) if not torch.is_tensor(obs[STATE_KEY])
                                 else obs[STATE_KEY]).float().to(self.device)[:, None].repeat(1, T, 1)
        mask = None if options is None else options.get("reset_mask")
        if mask is None or self._frames is None:
            self._frames, self._states = frames, states
            self._t = torch.zeros(frames.shape[0], dtype=torch.long, device=self.device)
            self._task = obs.get("task")
            self.num_envs = frames.shape[0]
        else:
            m = torch.as_tensor(np.asarray(mask), dtype=torch.bool, device=self.device)
            self._frames[m], self._states[m], self._t[m] = frames[m], states[m], 0
        zeros = torch.zeros(self.num_envs, device=self.device)
        return self._obs(), self._out({"success_prob": zeros, "score_var": zeros})

    @torch.no_grad()  # not inference_mode: reset() updates the context in place afterwards
    def step(self, actions):
        """Advance every imagined episode by one action.

        Args:
            actions: (B, A) array or tensor.

        Returns:
            (observation, reward (B,), terminated (B,), truncated (B,), info) as numpy (or tensors).
        """
        if self._frames is None:
            raise RuntimeError("call reset() before step()")
        a = torch.as_tensor(np.asarray(actions) if not torch.is_tensor(actions) else actions)
        a = a.to(self.device, torch.float32).clamp(-1, 1)  # the simulators clip actions to their box too
        out = self.model.step(self._frames, self._states, a, generator=self.generator)
        self._frames = torch.cat([self._frames[:, 1:], out.frame[:, None]], dim=1)
        self._states = torch.cat([self._states[:, 1:], out.state[:, None]], dim=1)
        self._t += 1
        terminated = out.success_prob > self.success_threshold
        truncated = (self._t >= self.horizon) & ~terminated
        info = {"success_prob": out.success_prob, "score_var": out.score_var, "is_success": terminated}
        return self._obs(), *self._out(out.reward, terminated, truncated), self._out(info)

    # ---------------------------------------------------------------------------------------------------------- #
    def _obs(self) -> dict:
        frame = (self._frames[:, -1] * 255).round().to(torch.uint8).permute(0, 2, 3, 1)  # (B, H, W, C)
        obs = {k: frame[..., 3 * i:3 * i + 3] for i, k in enumerate(self.image_keys)}
        obs[STATE_KEY] = self._states[:, -1]
        obs = self._out(obs)
        if self._task is not None:
            obs["task"] = self._task
        return obs

    def _out(self, *values):
        """Tensors -> numpy (when ``return_numpy``), through dicts; one value in, one out."""
        def conv(v):
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            if self.return_numpy and torch.is_tensor(v):
                return np.ascontiguousarray(v.cpu().numpy())
            return v
        outs = tuple(conv(v) for v in values)
        return outs[0] if len(outs) == 1 else outs

    def close(self) -> None:
        """Nothing to release (kept for the vector-env contract)."""
