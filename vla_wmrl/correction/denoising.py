"""Inverse-variance denoising: the anchor-stream weight and per-sample weights from predictive variance.

The world-model gradient has roughly (1 + c * s2) times the variance of the real one, where s2 is the calibrated
disagreement between predicted and real outcomes; inverse-variance fusion therefore up-weights the real (anchor) stream
by that factor. Within the imagined stream, samples the world model is unsure of count less.
"""

from __future__ import annotations

import numpy as np


def normalised_disagreement(calibrated: np.ndarray, real: np.ndarray, min_real_var: float = 1e-6) -> float | None:
    """s2 = mean(((f(p) - mean f(p)) - (r - mean r))^2) / Var(r) for one anchor group.

    Args:
        calibrated: (n,) calibrated predictions f(p) of the group's graded rollouts.
        real: (n,) real outcomes of the same rollouts.
        min_real_var: Groups with Var(r) at or below this carry no ranking signal and are skipped.

    Returns:
        s2, or None when the group is skipped (fewer than 2 rollouts or Var(r) ~ 0).
    """
    calibrated, real = np.asarray(calibrated, float), np.asarray(real, float)
    if real.size < 2:
        return None
    var_r = real.var()
    if var_r <= min_real_var:
        return None
    diff = (calibrated - calibrated.mean()) - (real - real.mean())
    return float(np.mean(diff**2) / var_r)


class AnchorWeight:
    """Weight of the anchor (real) stream from an exponential average D of the disagreement s2.

    After ``freeze_after`` observations, c = (w_target - 1) / D is frozen, so the weight starts at ``w_target`` and then
    tracks how D moves: w = clip(1 + c * D, 1, w_max). Before c is frozen the weight is exactly 1.

    Args:
        w_target: Weight at the moment c is frozen.
        w_max: Upper clip of the weight.
        half_life: Half-life of the exponential average, in observed groups.
        freeze_after: Observations before c is frozen.
    """

    def __init__(self, w_target: float = 2.0, w_max: float = 4.0, half_life: float = 64.0, freeze_after: int = 32):
        self.w_target, self.w_max, self.freeze_after = w_target, w_max, freeze_after
        self.alpha = 1.0 - 0.5 ** (1.0 / half_life)
        self.D = 0.0
        self.n_obs = 0
        self.c: float | None = None

    def observe(self, s2: float) -> None:
        """Fold one group's disagreement into D (and freeze c once enough observations exist)."""
        self.D = s2 if self.n_obs == 0 else (1.0 - self.alpha) * self.D + self.alpha * s2
        self.n_obs += 1
        if self.c is None and self.n_obs >= self.freeze_after:
            # max() guards a perfect world model (D = 0); the weight then stays at w_target while D stays 0.
            self.c = (self.w_target - 1.0) / max(self.D, 1e-12)

    @property
    def weight(self) -> float:
        """Current anchor-stream weight in [1, w_max]; exactly 1.0 until c is frozen."""
        if self.c is None:
            return 1.0
        return float(np.clip(1.0 + self.c * self.D, 1.0, self.w_max))

    def state_dict(self) -> dict:
        """JSON-serialisable state."""
        return {"D": self.D, "n_obs": self.n_obs, "c": self.c}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`."""
        self.D, self.n_obs, self.c = float(state["D"]), int(state["n_obs"]), state["c"]


def inverse_variance_weights(var: np.ndarray, mask: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """Per-sample weights 1 / (var + eps), normalised to mean 1 over ``mask``; 0 outside it.

    Args:
        var: (...) predictive variance per sample (any values where ``mask`` is False).
        mask: (...) bool, samples that contribute.
        eps: Floor that keeps a near-zero variance from taking all the weight.

    Returns:
        (...) weights.
    """
    mask = np.asarray(mask, bool)
    w = np.zeros(mask.shape)
    if mask.any():
        inv = 1.0 / (np.asarray(var, float)[mask] + eps)
        w[mask] = inv / inv.mean()
    return w
