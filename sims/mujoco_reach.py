"""`mujoco_reach`: a planar two-link arm reaching the red or the blue target, in pure MuJoCo.

Small and fast (several times faster than robosuite), yet real physics and real rendering: it serves fast tests and
quick experiments. The instruction names the target colour, so the language actually changes the task.
"""

from __future__ import annotations

import atexit
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np

from sims.base import ImageObsMixin, check_finite_state, instability_count

ASSET = Path(__file__).resolve().parent.parent / "assets" / "planar_reach.xml"
COLOURS = ("red", "blue")
LINK1, LINK2 = 0.2, 0.18


class MujocoReachEnv(ImageObsMixin, gym.Env):
    """Planar arm reaching a coloured target named by the instruction.

    Observation: ``observation.images.<cam>`` (H, W, 3) uint8 upright, ``observation.state`` (6,) float32 =
    [shoulder, elbow, fingertip x, fingertip y, shoulder vel, elbow vel], ``task`` (the instruction).
    Action: (2,) in [-1, 1], joint-position deltas scaled by ``max_delta`` radians per step.
    Reward: sparse 1 on success (fingertip within ``success_radius`` of the named target), or dense
    ``-distance`` when ``reward_type="dense"``.

    Args:
        image_size: camera image height = width in pixels.
        cameras: camera names; the MJCF defines ``top``.
        reward_type: ``"sparse"`` or ``"dense"``.
        horizon: steps before truncation.
        control_freq: policy steps per second (physics substeps fill the rest).
        colour: fix the target colour (``"red"``/``"blue"``) or ``None`` to sample it per episode.
        max_delta: joint-position change per step at action 1, in radians.
        success_radius: fingertip-to-target distance that counts as success, in metres.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, image_size: int = 64, cameras=("top",), reward_type: str = "sparse", horizon: int = 50,
                 control_freq: int = 20, colour: str | None = None, max_delta: float = 0.15,
                 success_radius: float = 0.04, render_mode: str = "rgb_array"):
        if colour is not None and colour not in COLOURS:
            raise ValueError(f"unknown colour {colour!r}; valid: {list(COLOURS)}")
        if reward_type not in ("sparse", "dense"):
            raise ValueError(f"unknown reward_type {reward_type!r}; valid: ['sparse', 'dense']")
        self.model = mujoco.MjModel.from_xml_path(str(ASSET))
        self.data = mujoco.MjData(self.model)
        valid_cams = [self.model.camera(i).name for i in range(self.model.ncam)]
        self._check_cameras(cameras, valid_cams, image_size, max_size=2048)
        self.model.vis.global_.offwidth = self.model.vis.global_.offheight = image_size
        self.image_size, self.cameras = image_size, tuple(cameras)
        self.reward_type, self.horizon, self.colour = reward_type, horizon, colour
        self.max_delta, self.success_radius = max_delta, success_radius
        self.render_mode = render_mode
        self.n_substeps = max(1, round(1.0 / (control_freq * self.model.opt.timestep)))
        self._renderer: mujoco.Renderer | None = None
        self._target_colour = "red"
        self._t = 0
        self.observation_space = self._make_observation_space(state_dim=6)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    # ----------------------------------------------------------------------------------------------------------- #
    @property
    def instruction(self) -> str:
        return f"reach the {self._target_colour} target"

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        rng = self.np_random
        self._target_colour = self.colour or COLOURS[int(rng.integers(2))]
        q0 = rng.uniform([-2.5, -2.0], [2.5, 2.0])
        self.data.qpos[:] = q0
        self.data.ctrl[:] = q0
        # Two targets at reachable, well separated positions.
        for name in ("target_red", "target_blue"):
            r, a = rng.uniform(0.15, 0.34), rng.uniform(-np.pi, np.pi)
            self.data.mocap_pos[self.model.body(name).mocapid[0]] = [r * np.cos(a), r * np.sin(a), 0.005]
        while np.linalg.norm(self._target_pos("red") - self._target_pos("blue")) < 0.15:
            r, a = rng.uniform(0.15, 0.34), rng.uniform(-np.pi, np.pi)
            self.data.mocap_pos[self.model.body("target_blue").mocapid[0]] = [r * np.cos(a), r * np.sin(a), 0.005]
        mujoco.mj_forward(self.model, self.data)
        self._t = 0
        return self._obs(), self._info(unstable=False)

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        lo, hi = self.model.actuator_ctrlrange.T
        self.data.ctrl[:] = np.clip(self.data.ctrl + self.max_delta * action, lo, hi)
        warnings_before = instability_count(self.data)
        mujoco.mj_step(self.model, self.data, nstep=self.n_substeps)
        self._t += 1
        unstable = not check_finite_state(self.data, warnings_before)
        success = (not unstable) and self._distance() < self.success_radius
        if self.reward_type == "sparse":
            reward = float(success)
        else:
            reward = -self._distance() if not unstable else -1.0
        terminated = bool(success or unstable)
        truncated = self._t >= self.horizon and not terminated
        if unstable:  # keep the run alive: the episode ends, flagged, with a valid observation
            mujoco.mj_resetData(self.model, self.data)
            mujoco.mj_forward(self.model, self.data)
        return self._obs(), reward, terminated, truncated, self._info(unstable, success)

    # ------------------------------------------------------------------------------------------------------------ #
    def _target_pos(self, colour: str) -> np.ndarray:
        return self.data.mocap_pos[self.model.body(f"target_{colour}").mocapid[0]][:2].copy()

    def _fingertip(self) -> np.ndarray:
        return self.data.site("fingertip").xpos[:2].copy()

    def _distance(self) -> float:
        return float(np.linalg.norm(self._fingertip() - self._target_pos(self._target_colour)))

    def _render_camera(self, camera: str) -> np.ndarray:
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image_size, self.image_size)
            atexit.register(self.close)  # free the GL context before the interpreter tears EGL down
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render()  # mujoco.Renderer already returns upright images

    def _state(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[:2], self._fingertip(), self.data.qvel[:2]]).astype(np.float32)

    def _info(self, unstable: bool, success: bool = False) -> dict:
        return {"is_success": bool(success), "sim_unstable": bool(unstable),
                "privileged": {"qpos": self.data.qpos[:2].copy(), "ctrl": self.data.ctrl.copy(),
                               "target": self._target_pos(self._target_colour)}}

    def get_state(self) -> dict:
        """Full simulator state (physics, controls, targets, episode clock) for an exact restore."""
        return {"qpos": self.data.qpos.copy(), "qvel": self.data.qvel.copy(), "ctrl": self.data.ctrl.copy(),
                "mocap_pos": self.data.mocap_pos.copy(), "time": self.data.time, "t": self._t,
                "colour": self._target_colour}

    def set_state(self, state: dict):
        """Restore a state from :meth:`get_state`; returns the observation there."""
        self.data.qpos[:], self.data.qvel[:], self.data.ctrl[:] = state["qpos"], state["qvel"], state["ctrl"]
        self.data.mocap_pos[:] = state["mocap_pos"]
        self.data.time, self._t, self._target_colour = state["time"], state["t"], state["colour"]
        self.data.qacc_warmstart[:] = 0
        mujoco.mj_forward(self.model, self.data)
        return self._obs()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


class ReachExpert:
    """Scripted expert for `mujoco_reach`: analytic two-link inverse kinematics towards the named target.

    Args:
        noise: standard deviation of Gaussian noise added to the action.
        seed: seed of the noise generator.
    """

    def __init__(self, noise: float = 0.0, seed: int | None = None, max_delta: float = 0.15):
        self.noise, self.max_delta = noise, max_delta
        self.rng = np.random.default_rng(seed)

    def reset(self):
        pass

    def act(self, privileged: dict) -> np.ndarray:
        x, y = privileged["target"]
        q = privileged["ctrl"]  # position actuators track ctrl; steer the set-point
        d2 = np.clip((x * x + y * y - LINK1**2 - LINK2**2) / (2 * LINK1 * LINK2), -1.0, 1.0)
        best = None
        for elbow in (np.arccos(d2), -np.arccos(d2)):  # both IK branches; take the nearer one
            shoulder = np.arctan2(y, x) - np.arctan2(LINK2 * np.sin(elbow), LINK1 + LINK2 * np.cos(elbow))
            shoulder = (shoulder + np.pi) % (2 * np.pi) - np.pi  # inside the joint range, no wrap-through
            diff = np.array([shoulder, elbow]) - q
            if best is None or np.abs(diff).sum() < np.abs(best).sum():
                best = diff
        action = np.clip(best / self.max_delta, -1.0, 1.0)
        if self.noise > 0:
            action = np.clip(action + self.rng.normal(0.0, self.noise, 2), -1.0, 1.0)
        return action.astype(np.float32)
