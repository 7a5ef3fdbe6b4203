"""Where WMRL's real episodes come from: a simulator, or a robot (through LeRobot's drivers) with a dataset.

The trainer (``vla_wmrl.train``) needs four things from "reality", and both executors here provide them:

- the task's spaces (``observation_space``, ``action_space``, ``image_keys``, ``fps``), to check that policy and
  world model fit before any training;
- ``start_observations(seeds)``: real first observations that imagined groups start from;
- ``run(policy, seeds)``: real episodes (anchor groups, or every group in ``mode=sim``);
- ``evaluate(policy, episodes)``: the success rate of the deterministic policy.

:class:`SimExecutor` does all of it in a simulator: seeded resets, vectorised episodes in worker processes.
:class:`RobotExecutor` is the simulator-free path (``sim=none dataset=<LeRobotDataset>``): imagined groups start from
the first frames of the dataset's episodes, and anchor and evaluation episodes run on a LeRobot ``Robot`` through
:class:`vla_wmrl.robot_env.RobotEnv` (operator resets and labels, safety, every episode recorded). Without a robot
(``robot`` unset) only imagination runs: ``wmrl.mode=wm``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vla_wmrl.rollout import Episode

log = logging.getLogger(__name__)


@dataclass
class RobotRunConfig:
    """Robot episodes of a simulator-free run (``robot_run`` in ``configs/train.yaml``); see ``vla_wmrl.robot_env``."""

    realtime: bool = True            # keep the control period; false only for the simulated robot
    operator: str = "auto"           # auto | keyboard (Enter to reset, y/n to label) | sim
    success_classifier: str | None = None  # "module:function" labelling an Episode instead of the operator
    task: str | None = None          # instruction; null = the robot's own or the dataset's only one
    action_margin: float = 0.05      # clip actions to the dataset's range widened by this fraction on each side
    max_action_delta: float | None = None  # max change of each action entry per step; null = off
    read_timeout_s: float = 5.0      # a slower robot call stops the run as unresponsive
    video: bool = True               # record the robot episodes' images as mp4
    resize_images: str | None = None  # squash | crop: camera frames resized to the dataset's (see resize_dataset)


class SimExecutor:
    """Real episodes in a registered simulator: ``num_envs`` worker processes plus one in-process env for start
    frames. Training episodes are truncated at ``horizon``, evaluation episodes at ``eval_horizon`` (None: the
    same), both in the same workers."""

    kind = "sim"

    def __init__(self, sim, horizon: int, num_envs: int = 2, eval_horizon: int | None = None):
        import sims

        self.sim, self.name, self.fps = sim, f"sim {sim.name}", sim.fps
        self.horizon, self.eval_horizon = horizon, eval_horizon or horizon
        kwargs = {**sim.env_kwargs(), "horizon": max(self.horizon, self.eval_horizon)}
        self.envs = sims.make_vector_env(sim.name, num_envs, **kwargs)
        self.start_env = sims.make_env(sim.name, **kwargs)
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        self.image_keys = [k for k in self.observation_space.spaces if k.startswith("observation.images.")]
        self.image_size = sim.image_size
        self.can_run = True

    def start_observations(self, seeds: list[int]) -> dict:
        """Batched first observations of seeded resets."""
        from vla_wmrl.imagination import start_observations

        return start_observations(self.start_env, seeds)

    def run(self, adapter, seeds: list[int], max_steps: list[int] | None = None, cameras: bool = True
            ) -> list[Episode]:
        """One episode per seed (repeat a seed for a group), over the worker processes, returned in the order of
        ``seeds`` (not the order they finished in, which depends on timing); ``max_steps``: one step limit per seed,
        capped at the horizon (None: the horizon); ``cameras=False``: nothing rendered, black image observations
        (only for policies that ignore them)."""
        from vla_wmrl.rollout import run_episodes

        # every call sets the rendering it needs, so an interrupted camera-less replay leaves no black frames behind
        self.envs.call("set_cameras_enabled", cameras)
        limits = self.horizon if max_steps is None else [min(int(m), self.horizon) for m in max_steps]
        return sorted(run_episodes(self.envs, adapter, seeds, max_steps=limits), key=lambda ep: ep.index)

    def replay(self, sequences: list[np.ndarray], seeds: list[int], max_steps: list[int] | None = None,
               cameras: bool = True) -> list[Episode]:
        """Play fixed action sequences open-loop from seeded resets, one episode per (sequence, seed), returned in
        the order given. The scene is deterministic, so this is the true outcome of those actions from that start
        state (e.g. of action sequences imagined in the world model). A sequence shorter than the episode holds its
        last action; ``max_steps`` (one per sequence, capped at the horizon) ends a replay early. ``cameras=False``
        renders nothing (black image observations, the same physics and outcomes): for replays only their
        outcomes are wanted from, several times faster."""
        from vla_wmrl.rollout import ReplayPolicy

        if len(sequences) != len(seeds):
            raise ValueError(f"replay: {len(sequences)} action sequences for {len(seeds)} seeds")
        # episode k played sequences[k]
        return self.run(ReplayPolicy(sequences, self.envs.num_envs), seeds, max_steps=max_steps, cameras=cameras)

    def evaluate(self, policy, episodes: int, seed: int) -> dict:
        """Success rate of the deterministic policy over ``episodes`` seeded episodes of ``eval_horizon`` steps
        (reusing the workers)."""
        from vla_wmrl.eval import evaluate

        self.envs.call("set_cameras_enabled", True)
        return evaluate(policy, self.sim, episodes, seed=seed, deterministic=True, envs=self.envs, progress=False,
                        max_steps=self.eval_horizon)

    def close(self) -> None:
        self.envs.close()
        self.start_env.close()


class RobotExecutor:
    """A task defined by a LeRobotDataset; real episodes on a LeRobot robot (optional).

    Args:
        dataset: the dataset (path or repo id) that defines cameras, state/action layout, fps and instructions.
        robot_cfg: a robot config dict (``configs/robot/*.yaml``: ``type`` plus LeRobot's fields), or None for
            imagination only.
        horizon: steps per robot episode (at the dataset's fps).
        run_cfg: operator, safety and recording settings of the robot's episodes.
        record_root: the LeRobotDataset every robot episode (anchor and evaluation) is recorded into.
    """

    kind = "dataset"

    def __init__(self, dataset: str, robot_cfg: dict | None, horizon: int, run_cfg: RobotRunConfig | None = None,
                 record_root: str | Path | None = None):
        from vla_wmrl.dataset_spec import dataset_spec

        self.spec = dataset_spec(dataset)
        self.name = f"dataset {self.spec.repo_id}"
        self.fps = self.spec.fps
        self.observation_space = self.spec.observation_space
        self.action_space = self.spec.action_space
        self.image_keys = self.spec.image_keys
        self.image_size = self.spec.square_image_size
        self._starts = None
        self.env = None
        self.can_run = robot_cfg is not None
        if robot_cfg is not None:
            from vla_wmrl.eval_robot import _success_fn, make_operator, make_robot
            from vla_wmrl.robot_env import RobotEnv, RobotEnvConfig

            rc = run_cfg or RobotRunConfig()
            robot = make_robot(robot_cfg)
            self.name = f"robot {robot_cfg['type']} on dataset {self.spec.repo_id}"
            env_cfg = RobotEnvConfig(episode_time_s=horizon / self.fps, realtime=rc.realtime, task=rc.task,
                                     action_margin=rc.action_margin, max_action_delta=rc.max_action_delta,
                                     read_timeout_s=rc.read_timeout_s, video=rc.video,
                                     resize_images=rc.resize_images)
            self.env = RobotEnv(robot, self.spec, env_cfg, operator=make_operator(rc.operator, robot),
                                success_fn=_success_fn(rc.success_classifier), record_root=record_root,
                                repo_id=f"local/robot_episodes_{robot_cfg['type']}")
            self.env.connect()

    def start_observations(self, seeds: list[int]) -> dict:
        """First frames of the dataset's episodes (episode ``seed % episodes``), with their instructions."""
        if self._starts is None:
            self._starts = first_frames(self.spec.root, self.image_keys)
        n = len(self._starts["task"])
        idx = [int(s) % n for s in seeds]
        return {k: (tuple(v[i] for i in idx) if k == "task" else v[idx]) for k, v in self._starts.items()}

    def run(self, adapter, seeds: list[int]) -> list[Episode]:
        """One robot episode per seed, one after the other (the operator resets the scene before each)."""
        if self.env is None:
            raise RuntimeError("real episodes need a robot: pass robot=<type> (e.g. robot=so101_follower), or "
                               "train in the world model alone with wmrl.mode=wm")
        return [self.env.run_episode(adapter, seed=int(s)) for s in seeds]

    def evaluate(self, policy, episodes: int, seed: int) -> dict:
        """Success rate of the deterministic policy over ``episodes`` robot episodes; NaN without a robot."""
        from vla_wmrl.policies import RolloutAdapter

        if self.env is None or episodes <= 0:
            return {"success_rate": float("nan"), "episodes": 0}
        adapter = RolloutAdapter(policy, deterministic=True)
        eps = [self.env.run_episode(adapter, seed=seed + k, keep_images=False) for k in range(episodes)]
        success = np.array([e.success for e in eps], dtype=float)
        return {"success_rate": float(success.mean()), "episodes": episodes, "successes": int(success.sum()),
                "mean_length": float(np.mean([e.length for e in eps]))}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def first_frames(root: str | Path, image_keys: list[str]) -> dict:
    """The first observation of every episode of a LeRobotDataset, batched like a vector env's (uint8 HWC images,
    float32 state, ``task`` tuple)."""
    from vla_wmrl.data import load_dataset

    ds = load_dataset(root)
    items = [ds[int(i)] for i in ds.meta.episodes["dataset_from_index"]]
    obs = {k: np.stack([(it[k].permute(1, 2, 0) * 255).round().byte().numpy() for it in items]) for k in image_keys}
    obs["observation.state"] = np.stack([it["observation.state"].float().numpy() for it in items])
    obs["task"] = tuple(str(it["task"]) for it in items)
    return obs


__all__ = ["RobotExecutor", "RobotRunConfig", "SimExecutor", "first_frames"]
