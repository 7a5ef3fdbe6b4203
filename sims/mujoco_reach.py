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
# Workspace. Targets lie in front of the arm (x > 0), so one inverse-kinematics branch (elbow >= 0) reaches each with a
# shoulder angle inside (-pi, pi/2): no wrap-around at +-pi. The joint box is convex, so moving the set-points straight
# towards that solution never meets a joint limit, wherever the arm starts. The expert's action is then a smooth
# function of the state (apart from the saturation), which behaviour cloning learns from ~100 demonstrations.
START_JOINTS = ([-2.5, -2.0], [2.5, 2.0])  # (low, high) of the initial [shoulder, elbow], radians
TARGET_RADIUS = (0.15, 0.34)               # distance of a target from the shoulder, metres
TARGET_ANGLE = (-np.pi / 2, np.pi / 2)     # bearing of a target, radians
MIN_TARGET_GAP = 0.15                      # minimum distance between the two targets, metres
# Entries of ``observation.state`` (LeRobot motor-style names; sims.lerobot_robot exposes them as robot features).
STATE_NAMES = ["shoulder.pos", "elbow.pos", "fingertip.x", "fingertip.y", "shoulder.vel", "elbow.vel",
               "shoulder.goal", "elbow.goal", "red_target.x", "red_target.y", "blue_target.x", "blue_target.y"]


class MujocoReachEnv(ImageObsMixin, gym.Env):
    """Planar arm reaching a coloured target named by the instruction.

    Observation: ``observation.images.<cam>`` (H, W, 3) uint8 upright, ``observation.state`` (12,) float32 =
    :data:`STATE_NAMES` (joint positions, fingertip, joint velocities, the joint set-points the actions move, and
    the positions of *both* targets), ``task`` (the instruction).
    Action: (2,) in [-1, 1], deltas on the joint-position set-points, scaled by ``max_delta`` radians per step.

    The state is Markov for the task: the set-point is in it (an action moves the set-point, not the joint, and the
    servo lags), and so are both targets, in a fixed order that does not depend on which one is named. Only the
    instruction says which target to reach, so a policy that ignores it can do no better than a coin toss.
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
        self.observation_space = self._make_observation_space(state_dim=len(STATE_NAMES))
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
        q0 = rng.uniform(*START_JOINTS)
        self.data.qpos[:] = q0
        self.data.ctrl[:] = q0
        # Two targets in front of the arm, reachable with the elbow bent one way, well separated.
        for name in ("target_red", "target_blue"):
            self._place_target(name, rng)
        while np.linalg.norm(self._target_pos("red") - self._target_pos("blue")) < MIN_TARGET_GAP:
            self._place_target("target_blue", rng)
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
    def _place_target(self, name: str, rng: np.random.Generator):
        r, a = rng.uniform(*TARGET_RADIUS), rng.uniform(*TARGET_ANGLE)
        self.data.mocap_pos[self.model.body(name).mocapid[0]] = [r * np.cos(a), r * np.sin(a), 0.005]

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
        return np.concatenate([self.data.qpos[:2], self._fingertip(), self.data.qvel[:2], self.data.ctrl[:2],
                               self._target_pos("red"), self._target_pos("blue")]).astype(np.float32)

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

    It moves the joint set-points straight towards the elbow-positive IK solution of the named target, at most
    ``max_delta`` radians per step. Everything it uses is in the observation (set-points and both targets in
    ``observation.state``, the colour in ``task``), so its action is a function of what a policy sees; with the
    workspace of :class:`MujocoReachEnv` (targets in front, one IK branch, no joint limit in the way) that function is
    smooth apart from the saturation at +-1. (An earlier expert chose the nearer of both IK branches and wrapped the
    shoulder angle: discontinuous, and far harder to clone; see docs/policies.md, Results.)

    Args:
        noise: standard deviation of Gaussian noise added to the action.
        seed: seed of the noise generator.
        max_delta: the env's set-point change per step at action 1, in radians.
    """

    def __init__(self, noise: float = 0.0, seed: int | None = None, max_delta: float = 0.15):
        self.noise, self.max_delta = noise, max_delta
        self.rng = np.random.default_rng(seed)

    def reset(self):
        pass

    @staticmethod
    def joint_goal(target: np.ndarray) -> np.ndarray:
        """Joint angles [shoulder, elbow] (elbow >= 0) that put the fingertip on ``target`` (x, y)."""
        x, y = target
        cos_elbow = np.clip((x * x + y * y - LINK1**2 - LINK2**2) / (2 * LINK1 * LINK2), -1.0, 1.0)
        elbow = np.arccos(cos_elbow)
        shoulder = np.arctan2(y, x) - np.arctan2(LINK2 * np.sin(elbow), LINK1 + LINK2 * np.cos(elbow))
        return np.array([shoulder, elbow])

    def act(self, privileged: dict) -> np.ndarray:
        # Position actuators track ctrl: steer the set-point, not the (lagging) joint.
        action = np.clip((self.joint_goal(privileged["target"]) - privileged["ctrl"]) / self.max_delta, -1.0, 1.0)
        if self.noise > 0:
            action = np.clip(action + self.rng.normal(0.0, self.noise, 2), -1.0, 1.0)
        return action.astype(np.float32)
