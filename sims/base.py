"""Pieces shared by every environment in `sims/`: the observation layout and input checks.

Observation keys follow LeRobot's batch keys, so an observation can be written to a LeRobotDataset as it is:
``observation.images.<camera>`` (H, W, 3) uint8 upright, ``observation.state`` (D,) float32, ``task`` (str).
"""

from __future__ import annotations

import string

import gymnasium as gym
import mujoco
import numpy as np
from lerobot.utils.constants import OBS_IMAGES, OBS_STATE

INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " ,.'-"


def image_key(camera: str) -> str:
    """LeRobot batch key of a camera image, e.g. ``observation.images.agentview``."""
    return f"{OBS_IMAGES}.{camera}"


_INSTABILITY = ("mjWARN_BADQACC", "mjWARN_BADQPOS", "mjWARN_BADQVEL")


def instability_count(data) -> int:
    """How many times MuJoCo has flagged this simulation as unstable (it then resets the state by itself)."""
    return sum(int(data.warning[getattr(mujoco.mjtWarning, w)].number) for w in _INSTABILITY)


def check_finite_state(data, warnings_before: int | None = None) -> bool:
    """True when the MuJoCo state is finite and, given the count before a step, MuJoCo raised no new
    instability warning during it (an unstable simulation produces NaN/inf, which MuJoCo silently resets)."""
    finite = bool(np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all())
    return finite and (warnings_before is None or instability_count(data) == warnings_before)


class ImageObsMixin:
    """Builds the observation space and observation dict from ``_render_camera`` and ``_state``.

    ``cameras=()`` gives a state-only environment (no rendering at all), e.g. for throughput baselines."""

    image_size: int
    cameras: tuple[str, ...]
    cameras_enabled: bool = True  # False: image observations are black frames and nothing is rendered

    @staticmethod
    def _check_cameras(cameras, valid: list[str], image_size: int, max_size: int = 1024):
        if isinstance(cameras, str):
            raise TypeError(f"cameras must be a list of names, got the string {cameras!r}")
        unknown = [c for c in cameras if c not in valid]
        if unknown:
            raise ValueError(f"unknown camera(s) {unknown}; valid cameras: {valid}")
        if not isinstance(image_size, int) or not 8 <= image_size <= max_size:
            raise ValueError(f"image_size must be an integer in [8, {max_size}] pixels, got {image_size!r}")

    def _make_observation_space(self, state_dim: int) -> gym.spaces.Dict:
        spaces = {image_key(c): gym.spaces.Box(0, 255, (self.image_size, self.image_size, 3), np.uint8)
                  for c in self.cameras}
        spaces[OBS_STATE] = gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
        spaces["task"] = gym.spaces.Text(max_length=200, charset=INSTRUCTION_CHARSET)
        return gym.spaces.Dict(spaces)

    def set_cameras_enabled(self, enabled: bool) -> None:
        """Stop rendering (``False``) or resume it, from the next observation on. While off, every image
        observation is a black frame of the usual shape and dtype, and the physics are unchanged: e.g. to replay
        fixed action sequences, whose images nobody looks at, at several times the speed."""
        self.cameras_enabled = bool(enabled)

    def _obs(self) -> dict:
        blank = None if self.cameras_enabled else np.zeros((self.image_size, self.image_size, 3), np.uint8)
        obs = {image_key(c): self._render_camera(c) if blank is None else blank.copy() for c in self.cameras}
        obs[OBS_STATE] = self._state()
        obs["task"] = self.instruction
        return obs

    def render(self):
        if not self.cameras:
            raise RuntimeError("this environment was built without cameras (cameras=[]); nothing to render")
        if not self.cameras_enabled:
            raise RuntimeError("rendering is off (set_cameras_enabled(False)); turn it back on to render")
        return self._render_camera(self.cameras[0])
