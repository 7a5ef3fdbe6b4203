"""`vla_wmrl_sim`: one of our MuJoCo simulators behind LeRobot's ``Robot`` interface.

The whole real-robot path (connect, observe, act, disconnect, record, evaluate, anchors) then runs here without
hardware, through the same code a SO-101 goes through. ``SimRobot`` is a real ``lerobot.robots.Robot`` subclass and
``SimRobotConfig`` a registered ``RobotConfig`` choice, so LeRobot's own tools accept it::

    from lerobot.robots import make_robot_from_config
    import sims.lerobot_robot  # registers robot.type=vla_wmrl_sim
    robot = make_robot_from_config(SimRobotConfig(sim="mujoco_reach"))

    lerobot-replay --robot.discover_packages_path=sims --robot.type=vla_wmrl_sim ...

Observation and action follow LeRobot's driver conventions: a flat dict of motor-style floats (``"shoulder.pos"``)
and camera names mapped to (H, W, 3) uint8 images. Actions keep the simulator's own semantics (for `mujoco_reach`:
joint-position deltas in [-1, 1]), so a policy trained on a simulator dataset drives the simulated robot unchanged.

What a robot cannot offer but a simulator can lives beside the ``Robot`` interface, duck-typed: ``reset_scene(seed)``
(the simulated operator putting the scene back), ``task`` (the scene's instruction), ``is_success``,
``episode_done`` and ``privileged`` (ground truth for scripted policies and success labels).
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from lerobot.robots.config import RobotConfig
from lerobot.robots.robot import Robot
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

import sims
from sims.mujoco_reach import STATE_NAMES as REACH_STATE_NAMES

# Motor-style names of each sim's state and action vector entries; sims not listed get "state_<i>" / "action_<i>".
FEATURE_NAMES: dict[str, tuple[list[str], list[str]]] = {
    "mujoco_reach": (REACH_STATE_NAMES, ["shoulder.delta", "elbow.delta"]),
}


@RobotConfig.register_subclass("vla_wmrl_sim")
@dataclass
class SimRobotConfig(RobotConfig):
    """Configuration of :class:`SimRobot` (``robot.type=vla_wmrl_sim``).

    ``cameras`` is deliberately not a field name: ``RobotConfig`` treats a ``cameras`` field as hardware camera
    configs.
    """

    sim: str = "mujoco_reach"        # registered sim name (sims.SIMS)
    sim_cameras: list[str] = field(default_factory=lambda: ["top"])  # simulator camera names, exposed as robot cameras
    image_size: int = 64             # camera height = width, pixels
    fps: int = 20                    # simulator control frequency, Hz
    seed: int = 0                    # reset seed used at connect() and when reset_scene() gets no seed


class SimRobot(Robot):
    """A registered simulator presented as a LeRobot robot.

    The simulator is built lazily (feature queries work before ``connect``, as LeRobot requires) and reset at
    ``connect``. The simulator's own episode ends (success, horizon) do not stop the robot: like hardware it keeps
    accepting actions until the caller stops; ``episode_done`` tells a caller that wants to stop there.

    All simulator work runs on one thread owned by the robot (an OpenGL context is bound to the thread that made
    it), so callers may use any thread, as they may with a hardware driver.
    """

    config_class = SimRobotConfig
    name = "vla_wmrl_sim"

    def __init__(self, config: SimRobotConfig):
        super().__init__(config)
        sims.gym_id(config.sim)  # fail early on an unknown sim, listing the valid ones
        self.config = config
        self._env = None
        self._connected = False
        self._obs: dict | None = None
        self._info: dict = {}
        self._done = False
        self._worker: ThreadPoolExecutor | None = None
        self._worker_id: int | None = None

    def _run(self, fn, *args):
        """Run ``fn`` on the simulator thread (directly when already on it)."""
        if threading.get_ident() == self._worker_id:
            return fn(*args)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-sim")
            self._worker_id = self._worker.submit(threading.get_ident).result()
        return self._worker.submit(fn, *args).result()

    # ---------------------------------------------------------------------------------------------------------- #
    def _sim(self):
        if threading.get_ident() != self._worker_id:
            return self._run(self._sim)
        if self._env is None:
            # The simulator's horizon is set far out: the episode length is the caller's business, as on hardware.
            self._env = sims.make_env(self.config.sim, image_size=self.config.image_size,
                                      cameras=tuple(self.config.sim_cameras), control_freq=self.config.fps,
                                      horizon=10**9)
        return self._env

    def _names(self) -> tuple[list[str], list[str]]:
        if self.config.sim in FEATURE_NAMES:
            return FEATURE_NAMES[self.config.sim]
        env = self._sim()
        state_dim = env.observation_space["observation.state"].shape[0]
        return [f"state_{i}" for i in range(state_dim)], [f"action_{i}" for i in range(env.action_space.shape[0])]

    @property
    def observation_features(self) -> dict:
        state_names, _ = self._names()
        size = self.config.image_size
        return {**{n: float for n in state_names}, **{c: (size, size, 3) for c in self.config.sim_cameras}}

    @property
    def action_features(self) -> dict:
        return {n: float for n in self._names()[1]}

    @property
    def cameras(self) -> dict:
        """Camera names (LeRobot's tools size image writers by ``len(robot.cameras)``)."""
        return {c: None for c in self.config.sim_cameras}

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        """Nothing to calibrate in simulation."""

    def configure(self) -> None:
        """Nothing to configure in simulation."""

    def connect(self, calibrate: bool = True) -> None:
        if self._connected:
            raise DeviceAlreadyConnectedError(f"{self} is already connected.")
        self._sim()
        self._connected = True
        self.configure()
        self.reset_scene(self.config.seed)

    def disconnect(self) -> None:
        if not self._connected:
            raise DeviceNotConnectedError(f"{self} is not connected. Run `.connect()` first.")
        self._connected = False
        if self._env is not None:
            self._run(self._env.close)
            self._env = None
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker, self._worker_id = None, None

    def _check_connected(self):
        if not self._connected:
            raise DeviceNotConnectedError(f"{self} is not connected. Run `.connect()` first.")

    def get_observation(self) -> dict:
        self._check_connected()
        state_names, _ = self._names()
        state = self._obs["observation.state"]
        obs = {n: float(v) for n, v in zip(state_names, state)}
        for c in self.config.sim_cameras:
            obs[c] = self._obs[f"observation.images.{c}"].copy()
        return obs

    def send_action(self, action: dict) -> dict:
        self._check_connected()
        names = self._names()[1]
        missing = [n for n in names if n not in action]
        if missing:
            raise ValueError(f"{self}: action misses {missing}; expected keys {names}, got {sorted(action)}")
        env = self._sim()
        vec = np.asarray([float(action[n]) for n in names], dtype=np.float32)
        vec = np.clip(vec, env.action_space.low, env.action_space.high)  # what the simulator actually applies
        self._obs, _, terminated, _, self._info = self._run(env.step, vec)
        self._done = self._done or bool(terminated)
        return {n: float(v) for n, v in zip(names, vec)}

    # --- simulator-only extras (duck-typed by vla_wmrl.robot_env) ------------------------------------------------- #
    def reset_scene(self, seed: int | None = None) -> None:
        """Put the scene back to a seeded start (what the operator does by hand on a real robot)."""
        self._check_connected()
        env = self._sim()
        self._obs, self._info = self._run(lambda: env.reset(seed=self.config.seed if seed is None else int(seed)))
        self._done = False

    @property
    def task(self) -> str:
        """The current scene's instruction."""
        return self._obs["task"] if self._obs is not None else ""

    @property
    def is_success(self) -> bool:
        """Whether the task is solved in the current state (the ground-truth success label)."""
        return bool(self._info.get("is_success", False))

    @property
    def episode_done(self) -> bool:
        """Whether the simulator ended its episode (success or instability) since the last ``reset_scene``."""
        return self._done

    @property
    def privileged(self) -> dict:
        """The simulator's privileged state (for scripted policies)."""
        return self._info.get("privileged", {})


class SimRobotExpert:
    """The sim's scripted expert driving a :class:`SimRobot`, shaped as a batched rollout policy (batch of one).

    It reads the simulator's privileged state through the robot, so it is a test and sanity-check policy for the
    robot path, not something a real robot can run.
    """

    def __init__(self, robot: SimRobot, noise: float = 0.0, seed: int = 0):
        from sims.experts import make_expert

        self.robot = robot
        self.expert = make_expert(robot.config.sim, noise=noise, seed=seed)

    def reset(self, mask: np.ndarray, episodes: np.ndarray | None = None) -> None:
        self.expert.reset()

    def act(self, obs: dict, info: dict) -> np.ndarray:
        return self.expert.act(self.robot.privileged)[None]  # (1, A)


# LeRobot's generic factory (make_device_from_device_class) looks for the robot class in the config's parent package.
setattr(sys.modules["sims"], "SimRobot", SimRobot)
