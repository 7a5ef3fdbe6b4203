"""Online debiasing: a monotone, non-affine map from predicted score to expected real outcome.

GRPO standardises rewards within each group, which cancels any affine correction; only the *shape* of the map
matters. The map is therefore a binned isotonic regression (pool-adjacent-violators), not a linear fit.

A map of the score alone is monotone, so it can change the spacing of a group's scores but never their order. A learned
world model's bias is not a function of its score only: it is optimistic where it has seen little data (model
exploitation) and that is where its own predictive uncertainty is high. With ``uncertainty=True`` the calibrator also
learns a linear term in the world model's reported standard deviation, ``f(p, s) = g(p) + lam * (s - s_ref)``
(a partially linear model, fitted by backfitting), i.e. an uncertainty penalty (lam < 0) or bonus (lam > 0) whose size
is measured on the anchors instead of set by hand. That term can reorder a group.
"""

from __future__ import annotations

import numpy as np


def pool_adjacent_violators(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted isotonic (non-decreasing) regression of a sequence.

    Args:
        values: (n,) values to make monotone.
        weights: (n,) positive weights (e.g. bin counts).

    Returns:
        (n,) non-decreasing sequence minimising the weighted squared distance to ``values``.
    """
    # Each block is [weighted mean, total weight, number of entries]; merge while the last two violate order.
    blocks: list[list[float]] = []
    for v, w in zip(values.tolist(), weights.tolist()):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks[-1]
            blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    return np.concatenate([np.full(n, v) for v, _, n in blocks])


def centred_squared_error(pred: np.ndarray, real: np.ndarray) -> float:
    """Mean of ((pred - real) - mean(pred - real))^2: the error left once a constant offset is removed.

    A constant offset does nothing under GRPO, so this is the part of the bias that matters.
    """
    err = np.asarray(pred, float) - np.asarray(real, float)
    return float(np.mean((err - err.mean()) ** 2)) if err.size else 0.0


def _binned_isotonic(pred: np.ndarray, target: np.ndarray, num_bins: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Knots (mean prediction per non-empty bin, PAV-monotone mean target); None if fewer than two bins are used."""
    bins = np.clip((pred * num_bins).astype(int), 0, num_bins - 1)
    counts = np.bincount(bins, minlength=num_bins).astype(float)
    used = counts > 0
    if used.sum() < 2:
        return None
    mean_pred = np.bincount(bins, pred, num_bins)[used] / counts[used]
    mean_target = np.bincount(bins, target, num_bins)[used] / counts[used]
    return mean_pred, pool_adjacent_violators(mean_target, counts[used])


class MonotoneCalibrator:
    """Binned isotonic calibrator fitted online on (predicted, real) pairs in [0, 1].

    Pairs go into a FIFO buffer. Once ``min_pairs`` pairs exist the map is fitted, then refitted every
    ``refit_every`` new pairs. Fitting bins the predictions into ``num_bins`` equal bins on [0, 1], takes per-bin
    means of prediction and outcome, makes the outcome means non-decreasing with pool-adjacent-violators weighted by
    bin counts, and applies the map by linear interpolation through the per-bin (mean prediction, monotone mean
    outcome) knots, clamped at the end knots. Using each bin's mean prediction instead of its centre makes the map
    exact for smooth biases whose predictions fill a bin unevenly (e.g. only its upper half). Until fitted the map is
    the identity.

    With ``uncertainty=True`` each pair also carries the world model's reported standard deviation s, and the map is
    ``g(p) + lam * (s - s_ref)``: g binned-isotonic as above, lam a least-squares slope on the residuals, alternated
    (backfitting) a few times, then shrunk towards 0 by its sampling error (``lam * max(0, 1 - se^2 / lam^2)``, the
    empirical-Bayes posterior mean), so a slope the buffer cannot distinguish from 0 is not applied.

    Args:
        buffer_size: Maximum number of pairs kept (oldest dropped first).
        min_pairs: Pairs needed before the first fit.
        refit_every: New pairs between refits once fitted.
        num_bins: Equal-width bins on [0, 1].
        uncertainty: Also learn the linear term in the reported standard deviation.
    """

    backfit_iters = 5  # alternations of the isotonic fit and the slope fit (converges in 2-3 in practice)

    def __init__(
        self,
        buffer_size: int = 5000,
        min_pairs: int = 200,
        refit_every: int = 64,
        num_bins: int = 10,
        uncertainty: bool = False,
    ):
        self.buffer_size, self.min_pairs, self.refit_every, self.num_bins = buffer_size, min_pairs, refit_every, num_bins
        self.uncertainty = uncertainty
        self.pred = np.zeros(0)
        self.real = np.zeros(0)
        self.sd = np.zeros(0)  # (n,) world model's reported sd per pair (0 when not given)
        self.knots_x = np.zeros(0)  # (k,) increasing mean prediction per non-empty bin
        self.knots_y = np.zeros(0)  # (k,) non-decreasing calibrated outcome per knot
        self.sd_slope = 0.0  # lam: calibrated-outcome change per unit of reported sd (uncertainty=True)
        self.sd_ref = 0.0  # s_ref: mean reported sd of the buffer at the last fit
        self.new_since_fit = 0
        self.n_fits = 0
        self.n_seen = 0
        self.bias_removed = 0.0

    @property
    def fitted(self) -> bool:
        """Whether a map has been fitted (otherwise the calibrator is the identity)."""
        return self.knots_x.size > 0

    def add(self, pred: np.ndarray, real: np.ndarray, sd: np.ndarray | None = None) -> bool:
        """Add pairs (both in [0, 1]) and refit if the cadence says so.

        Args:
            pred: (n,) predicted scores.
            real: (n,) real outcomes.
            sd: (n,) the world model's reported standard deviation of each prediction (same units), or None (0).

        Returns:
            True if the map was (re)fitted.
        """
        pred, real = np.asarray(pred, float).ravel(), np.asarray(real, float).ravel()
        sd = np.zeros(pred.shape) if sd is None else np.asarray(sd, float).ravel()
        self.pred = np.concatenate([self.pred, pred])[-self.buffer_size :]
        self.real = np.concatenate([self.real, real])[-self.buffer_size :]
        self.sd = np.concatenate([self.sd, sd])[-self.buffer_size :]
        self.new_since_fit += pred.size
        self.n_seen += pred.size
        due = self.new_since_fit >= self.refit_every if self.fitted else self.pred.size >= self.min_pairs
        return self.fit() if due else False

    def fit(self) -> bool:
        """Fit the map on the buffer now. Returns False (map unchanged) if fewer than two bins are populated."""
        knots = _binned_isotonic(self.pred, self.real, self.num_bins)
        if knots is None:
            return False
        slope, ref = 0.0, 0.0
        sd_c = self.sd - self.sd.mean()
        var_sd = float(np.mean(sd_c**2))
        if self.uncertainty and var_sd > 1e-12:
            ref = float(self.sd.mean())
            for _ in range(self.backfit_iters):
                resid = self.real - np.interp(self.pred, *knots)
                slope = float(np.mean(sd_c * resid) / var_sd)
                knots = _binned_isotonic(self.pred, self.real - slope * sd_c, self.num_bins) or knots
            resid = self.real - np.interp(self.pred, *knots) - slope * sd_c
            se2 = float(np.mean((resid - resid.mean()) ** 2) / (var_sd * self.pred.size))
            slope *= max(0.0, 1.0 - se2 / slope**2) if slope != 0.0 else 0.0
        self.knots_x, self.knots_y = knots
        self.sd_slope, self.sd_ref = slope, ref
        self.new_since_fit = 0
        self.n_fits += 1
        raw = centred_squared_error(self.pred, self.real)
        calibrated = self(self.pred, sd=self.sd)
        self.bias_removed = 1.0 - centred_squared_error(calibrated, self.real) / raw if raw > 0 else 0.0
        return True

    def __call__(
        self, pred: np.ndarray, extrapolate: bool = False, min_slope: float = 0.0, sd: np.ndarray | None = None
    ) -> np.ndarray:
        """Map predicted scores in [0, 1] to calibrated scores (identity until fitted).

        Args:
            pred: Predicted scores in [0, 1].
            extrapolate: Beyond the end knots, continue the first/last segment's slope (clipped to [0, 1]) instead of
                clamping. The end knots sit at the end bins' *mean* predictions, so part of the data lies beyond them;
                clamping maps all of it to one value and erases the world model's ranking there.
            min_slope: Blend ``(1 - min_slope) * f(p) + min_slope * p``: the map's slope is then at least
                ``min_slope`` everywhere, so it never turns distinct predictions into ties (flat PAV-pooled segments,
                clipped ends). Under GRPO only within-group order and spacing matter; a tie discards the order.
            sd: The world model's reported standard deviation of each prediction (same shape), for the learned
                uncertainty term; None applies no such term (as does a calibrator fitted with ``uncertainty=False``).
        """
        pred = np.asarray(pred, float)
        if not self.fitted:
            return pred.copy()
        y = np.interp(pred, self.knots_x, self.knots_y)
        if extrapolate and self.knots_x.size >= 2:
            kx, ky = self.knots_x, self.knots_y
            lo_slope = (ky[1] - ky[0]) / max(kx[1] - kx[0], 1e-12)
            hi_slope = (ky[-1] - ky[-2]) / max(kx[-1] - kx[-2], 1e-12)
            y = np.where(pred < kx[0], ky[0] + lo_slope * (pred - kx[0]), y)
            y = np.where(pred > kx[-1], ky[-1] + hi_slope * (pred - kx[-1]), y)
            y = np.clip(y, 0.0, 1.0)
        if sd is not None and self.sd_slope != 0.0:
            y = np.clip(y + self.sd_slope * (np.asarray(sd, float) - self.sd_ref), 0.0, 1.0)
        if min_slope > 0.0:
            y = (1.0 - min_slope) * y + min_slope * pred
        return y

    def slope(self, pred: np.ndarray, extrapolate: bool = False, min_slope: float = 0.0) -> np.ndarray:
        """d f / d p at ``pred`` (central difference, one-sided at the domain ends); 1 until fitted.

        Used to carry a prediction's variance through the map (delta method: Var f(p) ~ f'(p)^2 Var p).
        """
        pred = np.asarray(pred, float)
        if not self.fitted:
            return np.ones(pred.shape)
        h = 1e-3
        lo, hi = np.clip(pred - h, 0.0, 1.0), np.clip(pred + h, 0.0, 1.0)
        return (self(hi, extrapolate, min_slope) - self(lo, extrapolate, min_slope)) / np.maximum(hi - lo, 1e-12)

    def state_dict(self) -> dict:
        """JSON-serialisable state (Python floats round-trip exactly through json)."""
        return {
            "pred": self.pred.tolist(),
            "real": self.real.tolist(),
            "sd": self.sd.tolist(),
            "knots_x": self.knots_x.tolist(),
            "knots_y": self.knots_y.tolist(),
            "sd_slope": self.sd_slope,
            "sd_ref": self.sd_ref,
            "new_since_fit": self.new_since_fit,
            "n_fits": self.n_fits,
            "n_seen": self.n_seen,
            "bias_removed": self.bias_removed,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict` (states saved before the uncertainty term existed load with s = 0)."""
        for key in ("pred", "real", "knots_x", "knots_y"):
            setattr(self, key, np.asarray(state[key], float))
        self.sd = np.asarray(state.get("sd", np.zeros(self.pred.size)), float)
        self.sd_slope, self.sd_ref = float(state.get("sd_slope", 0.0)), float(state.get("sd_ref", 0.0))
        self.new_since_fit, self.n_fits, self.n_seen = state["new_since_fit"], state["n_fits"], state["n_seen"]
        self.bias_removed = float(state["bias_removed"])
