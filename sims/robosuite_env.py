"""robosuite manipulation tasks behind one gymnasium wrapper (`robosuite_lift`, `robosuite_stack`).

Rendering is tuned for speed as measured in DESIGN.md: shadows, reflections and multisampling off and the offscreen
buffer sized to the image; this needs ``hard_reset=False`` (a hard reset rebuilds the render context).
"""

from __future__ import annotations

import copy
import logging
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import mujoco
import numpy as np

from sims.base import ImageObsMixin, check_finite_state, instability_count

log = logging.getLogger(__name__)

INSTRUCTIONS = {
    "Lift": "pick up the red cube",
    "Stack": "stack the red cube on the green cube",
}
PROPRIO_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")  # 3 + 4 + 2 = 9
ROBOSUITE_CAMERAS = ("agentview", "frontview", "birdview", "sideview", "robot0_eye_in_hand", "robot0_robotview")


def _quiet_robosuite():
    """robosuite logs every skipped controller part at WARNING on each construction; keep real errors only."""
    logger = logging.getLogger("robosuite_logs")
    logger.setLevel(logging.ERROR)
    for handler in logger.handlers:
        handler.setLevel(logging.ERROR)


def _copy_mjdata_into(dst, src) -> None:
    """In-place copy of the arrays of an MjData (robosuite keeps references to the live one)."""
    for name in dir(src):
        if name.startswith("_"):
            continue
        value = getattr(src, name)
        if isinstance(value, np.ndarray) and value.size:
            target = getattr(dst, name)
            # Contact/constraint arrays are sized by the current number of contacts; MuJoCo recomputes them at the
            # start of the next step, so only the fixed-size state and derived quantities need copying.
            if target.flags.writeable and target.shape == value.shape:
                target[...] = value
    dst.time = src.time


def _controller_state(controller) -> dict:
    """The numeric attributes of a robosuite controller (goals, cached poses, last action): what it remembers
    between steps beyond the MuJoCo state."""
    plain = (np.ndarray, float, int, bool, np.floating, np.integer, type(None))
    return {k: copy.deepcopy(v) for k, v in vars(controller).items() if isinstance(v, plain)}


class RobosuiteEnv(ImageObsMixin, gym.Env):
    """A robosuite manipulation task (Panda, OSC_POSE at ``control_freq`` Hz) as a gymnasium env.

    Observation: ``observation.images.<cam>`` (H, W, 3) uint8 upright, ``observation.state`` (9,) float32 =
    end-effector position (3), quaternion (4), gripper finger positions (2), and ``task`` (the instruction).
    Action: (7,) in [-1, 1]: end-effector position and rotation deltas, gripper (-1 open, 1 close).
    Reward: sparse 1 on success by default; robosuite's shaped reward with ``reward_type="dense"``.
    ``info``: ``is_success``, ``sim_unstable`` (the episode ended because the physics blew up) and
    ``privileged`` (object and robot state for scripted experts; never given to policies).

    Args:
        task: robosuite environment name (``Lift``, ``Stack``).
        image_size: camera image height = width in pixels.
        cameras: robosuite camera names.
        reward_type: ``"sparse"`` or ``"dense"``.
        horizon: steps before truncation.
        control_freq: policy steps per second.
        fast_render: turn off shadows, reflections and multisampling (about 2.5x faster on a software renderer).
        instruction: override the task's default language instruction.
        scene_seed: seed of the numpy draws robosuite makes while building the scene, once per process (Lift's cube
            edge is drawn from [0.020, 0.022] m). Fixed, so every worker and every run simulate the same objects and
            a seeded episode is reproducible across processes; per-episode randomness comes from ``reset(seed)``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, task: str = "Lift", image_size: int = 64, cameras=("agentview",), reward_type: str = "sparse",
                 horizon: int = 100, control_freq: int = 20, fast_render: bool = True, instruction: str | None = None,
                 render_mode: str = "rgb_array", scene_seed: int = 0):
        import robosuite as suite
        from robosuite.controllers import load_composite_controller_config

        _quiet_robosuite()

        if task not in INSTRUCTIONS:
            raise ValueError(f"unsupported robosuite task {task!r}; valid: {sorted(INSTRUCTIONS)}")
        if reward_type not in ("sparse", "dense"):
            raise ValueError(f"unknown reward_type {reward_type!r}; valid: ['sparse', 'dense']")
        self._check_cameras(cameras, list(ROBOSUITE_CAMERAS), image_size)
        self.task, self.image_size, self.cameras = task, image_size, tuple(cameras)
        self.reward_type, self.horizon, self.render_mode = reward_type, horizon, render_mode
        self._instruction = instruction or INSTRUCTIONS[task]
        controller = load_composite_controller_config(controller="BASIC", robot="Panda")
        outer_state = np.random.get_state()
        np.random.seed(scene_seed)  # robosuite draws object sizes from numpy's global generator at construction
        try:
            self.env = suite.make(
                task, robots="Panda", controller_configs=controller, has_renderer=False,
                has_offscreen_renderer=bool(cameras), use_camera_obs=bool(cameras), use_object_obs=True,
                camera_names=list(cameras) or None,
                camera_heights=image_size, camera_widths=image_size, reward_shaping=reward_type == "dense",
                control_freq=control_freq, horizon=horizon, ignore_done=True, hard_reset=False,
            )
        finally:
            np.random.set_state(outer_state)
        if fast_render and cameras:
            self._tune_renderer()
        self._t = 0
        self._raw: dict = {}
        self.observation_space = self._make_observation_space(state_dim=9)
        low, high = self.env.action_spec
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def _tune_renderer(self):
        ctx = self.env.sim._render_context_offscreen
        model = self.env.sim.model._model
        model.vis.quality.shadowsize = 0
        model.vis.quality.offsamples = 0
        model.vis.global_.offwidth = model.vis.global_.offheight = self.image_size
        ctx.con.free()
        ctx._set_mujoco_context_and_buffers()
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def set_cameras_enabled(self, enabled: bool) -> None:
        """As :meth:`ImageObsMixin.set_cameras_enabled`; robosuite's camera observables are switched too, so it
        renders nothing while off (``benchmarks/sim_throughput.py``, "64 px, off"). Switched back on mid-episode,
        the current frame is rendered at once. Setting the current state again changes nothing."""
        if bool(enabled) == self.cameras_enabled:
            return
        super().set_cameras_enabled(enabled)
        for camera in self.cameras:
            self.env.modify_observable(f"{camera}_image", "enabled", self.cameras_enabled)
        if self.cameras_enabled and self._raw:
            self._render_now()

    def _render_now(self) -> None:
        """Render the cameras at the current state into the raw observation (robosuite samples them only while
        stepping or resetting)."""
        for camera in self.cameras:
            observable = self.env._observables[f"{camera}_image"]
            observable.update(0.0, self.env._obs_cache, force=True)
            self._raw[f"{camera}_image"] = observable.obs

    # ------------------------------------------------------------------------------------------------------------ #
    @property
    def instruction(self) -> str:
        return self._instruction

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # robosuite samples object placements and robot noise from numpy's global generator; seed it from ours so
        # a seeded reset sequence is reproducible.
        sub_seed = int(self.np_random.integers(2**31 - 1))
        np.random.seed(sub_seed)
        self.env.rng = np.random.default_rng(sub_seed)
        self._raw = self.env.reset()
        self._t = 0
        return self._obs(), self._info(unstable=False)

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.action_space.shape), -1.0, 1.0)
        unstable, warnings_before = False, instability_count(self.env.sim.data._data)
        try:
            self._raw, dense, _, _ = self.env.step(action)
        except Exception as exc:  # robosuite/mujoco raise on unstable physics; end the episode, keep the run
            log.warning("robosuite step failed (%s: %s); ending the episode", type(exc).__name__, exc)
            unstable, dense = True, 0.0
        unstable = unstable or not check_finite_state(self.env.sim.data._data, warnings_before)
        self._t += 1
        success = (not unstable) and bool(self.env._check_success())
        reward = float(success) if self.reward_type == "sparse" else float(dense)
        terminated = bool(success or unstable)
        truncated = self._t >= self.horizon and not terminated
        if unstable:
            self._raw = self.env.reset()  # a finite state to observe; the episode is over anyway
        return self._obs(), reward, terminated, truncated, self._info(unstable, success)

    # ------------------------------------------------------------------------------------------------------------ #
    def _render_camera(self, camera: str) -> np.ndarray:
        return np.ascontiguousarray(self._raw[f"{camera}_image"][::-1])  # robosuite renders upside down

    def _state(self) -> np.ndarray:
        return np.concatenate([self._raw[k] for k in PROPRIO_KEYS]).astype(np.float32)

    def _info(self, unstable: bool, success: bool = False) -> dict:
        privileged = {k: np.asarray(v, dtype=np.float64).copy() for k, v in self._raw.items()
                      if not k.endswith("_image")}
        return {"is_success": bool(success), "sim_unstable": bool(unstable), "privileged": privileged}

    def get_state(self) -> dict:
        """Full simulator state for an exact restore: a copy of the whole MjData (including derived quantities,
        which robosuite's controllers read one substep stale), the controllers' memory and the episode clock."""
        model, data = self.env.sim.model._model, self.env.sim.data._data
        snapshot = copy.copy(data)  # MjData.__copy__ is MuJoCo's mj_copyData
        return {"mjdata": snapshot, "t": self._t, "timestep": self.env.timestep, "cur_time": self.env.cur_time,
                "raw_obs": copy.deepcopy(self._raw),
                "controllers": [_controller_state(c) for c in self._controllers()],
                "grippers": [g.current_action.copy() for g in self._grippers()]}

    def _controllers(self) -> list:
        return [c for r in self.env.robots for c in r.composite_controller.part_controllers.values()]

    def _grippers(self) -> list:
        return [g for r in self.env.robots for g in r.gripper.values()]

    def set_state(self, state: dict):
        """Restore a state from :meth:`get_state`; returns the observation there."""
        data = self.env.sim.data._data
        _copy_mjdata_into(data, state["mjdata"])
        self._t, self.env.timestep, self.env.cur_time = state["t"], state["timestep"], state["cur_time"]
        for gripper, saved in zip(self._grippers(), state["grippers"]):
            gripper.current_action = saved.copy()  # the Panda gripper integrates its open/close command
        for controller, saved in zip(self._controllers(), state["controllers"]):
            for key, value in saved.items():
                setattr(controller, key, copy.deepcopy(value))
        self._raw = copy.deepcopy(state["raw_obs"])
        if self.cameras_enabled and any(f"{c}_image" not in self._raw for c in self.cameras):
            self._render_now()  # a state saved while rendering was off
        return self._obs()

    def close(self):
        self.env.close()
