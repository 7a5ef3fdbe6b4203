"""Scripted experts: privileged-state controllers that generate demonstrations.

Every expert has ``reset()`` (call at each episode start) and ``act(privileged) -> action``, where ``privileged`` is
``info["privileged"]`` from the environment. ``noise`` adds Gaussian action noise (noisy experts give the world model
failures and near-misses to learn from).
"""

from __future__ import annotations

import numpy as np

from sims.mujoco_reach import ReachExpert

OSC_MAX_DELTA = 0.05  # metres per step at action 1 (robosuite OSC_POSE default output range)


class _PhaseExpert:
    """Shared machinery: a phase index, a step counter within it, position control towards a target."""

    def __init__(self, noise: float = 0.0, seed: int | None = None, gain: float = 1.0):
        self.noise, self.gain = noise, gain
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self):
        self.phase, self.t_phase, self.memory = 0, 0, {}

    def _next(self):
        self.phase, self.t_phase = self.phase + 1, 0

    def _move(self, eef: np.ndarray, target: np.ndarray, gripper: float) -> np.ndarray:
        action = np.zeros(7)
        action[:3] = np.clip(self.gain * (target - eef) / OSC_MAX_DELTA, -1.0, 1.0)
        action[6] = gripper
        if self.noise > 0:
            action[:3] = np.clip(action[:3] + self.rng.normal(0.0, self.noise, 3), -1.0, 1.0)
            action[3:6] = np.clip(self.rng.normal(0.0, self.noise * 0.2, 3), -1.0, 1.0)
        self.t_phase += 1
        return action.astype(np.float32)

    def _pick(self, eef: np.ndarray, obj: np.ndarray, phase0: int, hover: float = 0.08) -> np.ndarray | None:
        """Phases phase0..phase0+3: hover above ``obj``, descend, close, lift. None once the object is lifted."""
        p = self.phase - phase0
        if p == 0:  # approach: hover above the object, gripper open
            target = obj + [0.0, 0.0, hover]
            if np.linalg.norm((target - eef)[:2]) < 0.01 and abs(target[2] - eef[2]) < 0.02 or self.t_phase > 40:
                self._next()
            return self._move(eef, target, -1.0)
        if p == 1:  # descend around the object
            target = obj + [0.0, 0.0, -0.005]
            if abs(target[2] - eef[2]) < 0.01 or self.t_phase > 25:
                self._next()
            return self._move(eef, target, -1.0)
        if p == 2:  # close the gripper in place
            if self.t_phase >= 6:
                self.memory["lift_z"] = obj[2] + 0.15
                self._next()
            return self._move(eef, obj + [0.0, 0.0, -0.005], 1.0)
        return None


class LiftExpert(_PhaseExpert):
    """Lift: approach above the cube, descend, grasp, lift."""

    def act(self, privileged: dict) -> np.ndarray:
        eef, cube = privileged["robot0_eef_pos"], privileged["cube_pos"]
        action = self._pick(eef, cube, phase0=0)
        if action is not None:
            return action
        return self._move(eef, np.array([cube[0], cube[1], self.memory["lift_z"]]), 1.0)


class StackExpert(_PhaseExpert):
    """Stack: pick cube A (red), carry it above cube B (green), lower it onto B, release."""

    def act(self, privileged: dict) -> np.ndarray:
        eef, a, b = privileged["robot0_eef_pos"], privileged["cubeA_pos"], privileged["cubeB_pos"]
        action = self._pick(eef, a, phase0=0)
        if action is not None:
            return action
        if self.phase == 3:  # lift and carry above B
            target = b + [0.0, 0.0, 0.10]
            if np.linalg.norm((target - eef)[:2]) < 0.01 or self.t_phase > 50:
                self._next()
            return self._move(eef, target, 1.0)
        if self.phase == 4:  # lower onto B (cube A half-height ~0.02 + B's ~0.025)
            target = b + [0.0, 0.0, 0.05]
            if abs(target[2] - eef[2]) < 0.01 or self.t_phase > 25:
                self._next()
            return self._move(eef, target, 1.0)
        return self._move(eef, b + [0.0, 0.0, 0.05], -1.0)  # release and stay


EXPERTS = {"robosuite_lift": LiftExpert, "robosuite_stack": StackExpert, "mujoco_reach": ReachExpert}


def make_expert(sim: str, noise: float = 0.0, seed: int | None = None):
    """Build the scripted expert of a registered sim.

    Raises:
        ValueError: no expert exists for ``sim``; the message lists the sims that have one.
    """
    if sim not in EXPERTS:
        raise ValueError(f"no scripted expert for sim {sim!r}; experts exist for: {sorted(EXPERTS)}")
    return EXPERTS[sim](noise=noise, seed=seed)
