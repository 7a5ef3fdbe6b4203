"""Inverse-variance denoising: the anchor-stream weight and per-sample weights from predictive variance.

The world-model gradient has roughly (1 + c * s2) times the variance of the real one, where s2 is the calibrated
disagreement between predicted and real outcomes; inverse-variance fusion therefore up-weights the real (anchor) stream
by that factor. Within the imagined stream, samples the world model is unsure of count less.

That argument takes the real outcome to be (nearly) exact. If it is noisy (a binary success is Bernoulli), the
disagreement is the world model's error *plus* the outcome noise: E mean((df - dr)^2) = e2 + (n-1)/n * mean(noise).
From (prediction, single outcome) pairs only the sum is identifiable: a calibrated f has E[(f - r)^2 | f] = f(1 - f)
for binary r whatever f's resolution, so subtracting the "expected Bernoulli variance" f(1 - f) leaves only the
calibration error, not the world model's error. A *known* noise variance (a metric's seed-to-seed variance, a reward
with a known noise model) can be subtracted; ``normalised_disagreement(..., noise=...)`` does that.
"""

from __future__ import annotations

import numpy as np


def disagreement_terms(
    calibrated: np.ndarray, real: np.ndarray, noise: np.ndarray | None = None
) -> tuple[float, float] | None:
    """Numerator and denominator of the normalised disagreement of one anchor group.

    Args:
        calibrated: (n,) calibrated predictions f(p) of the group's graded rollouts.
        real: (n,) real outcomes of the same rollouts.
        noise: (n,) known variance of each real outcome about its expectation, or None (exact outcomes). Its
            expected contribution to the numerator, (n - 1) / n * mean(noise), is subtracted, so the numerator
            estimates the world model's own centred squared error (it can be negative for a single group).

    Returns:
        (mean(((f - mean f) - (r - mean r))^2) [- noise term], Var(r)), or None for fewer than 2 rollouts.
    """
    calibrated, real = np.asarray(calibrated, float), np.asarray(real, float)
    if real.size < 2:
        return None
    diff = (calibrated - calibrated.mean()) - (real - real.mean())
    num = float(np.mean(diff**2))
    if noise is not None:
        num -= (real.size - 1) / real.size * float(np.mean(noise))
    return num, float(real.var())


def normalised_disagreement(calibrated: np.ndarray, real: np.ndarray, min_real_var: float = 1e-6) -> float | None:
    """s2 = mean(((f(p) - mean f(p)) - (r - mean r))^2) / Var(r) for one anchor group.

    Args:
        calibrated: (n,) calibrated predictions f(p) of the group's graded rollouts.
        real: (n,) real outcomes of the same rollouts.
        min_real_var: Groups with Var(r) at or below this carry no ranking signal and are skipped.

    Returns:
        s2, or None when the group is skipped (fewer than 2 rollouts or Var(r) ~ 0).
    """
    terms = disagreement_terms(calibrated, real)
    if terms is None or terms[1] <= min_real_var:
        return None
    return terms[0] / terms[1]


def signal_variance(scores: np.ndarray, var: np.ndarray, mask: np.ndarray) -> float:
    """Within-group variance of the *true* scores, estimated from noisy ones: mean over groups of
    Var_g(scores) - (n_g - 1) / n_g * mean_g(var) (method of moments for scores = truth + independent noise).

    Args:
        scores: (num_groups, G) scores (any values where ``mask`` is False).
        var: (num_groups, G) each score's noise variance.
        mask: (num_groups, G) bool, samples that count; groups with fewer than 2 are ignored.

    Returns:
        The estimate, floored at 0 (0 when no group counts).
    """
    mask = np.asarray(mask, bool)
    n = mask.sum(1)
    rows = n >= 2
    if not rows.any():
        return 0.0
    x = np.where(mask, np.asarray(scores, float), 0.0)[rows]
    m, nr = mask[rows], n[rows]
    mean = x.sum(1) / nr
    var_g = (np.where(m, x - mean[:, None], 0.0) ** 2).sum(1) / nr
    noise_g = np.where(m, np.asarray(var, float)[rows], 0.0).sum(1) / nr * (nr - 1) / nr
    return max(float(np.mean(var_g - noise_g)), 0.0)


class AnchorWeight:
    """Weight of the anchor (real) stream from an exponential average D of the disagreement s2.

    After ``freeze_after`` observations, c = (w_target - 1) / D is frozen, so the weight starts at ``w_target`` and then
    tracks how D moves: w = clip(1 + c * D, 1, w_max). Before c is frozen the weight is exactly 1.

    Two ways to feed it (use one per instance): :meth:`observe` takes each group's ratio s2 and D averages the ratios
    (the reference); :meth:`observe_terms` takes the numerator and denominator and D is the ratio of their averages,
    which stays unbiased when a known outcome-noise term has been subtracted from the numerators (an expectation
    subtracted inside a per-group ratio is not, as Var(r) and the realised noise move together).

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
        self.num = 0.0  # averages used by observe_terms
        self.den = 0.0

    def observe(self, s2: float) -> None:
        """Fold one group's disagreement into D (and freeze c once enough observations exist)."""
        self.D = s2 if self.n_obs == 0 else (1.0 - self.alpha) * self.D + self.alpha * s2
        self._count()

    def observe_terms(self, num: float, den: float) -> None:
        """Fold one group's disagreement numerator and Var(r) into their averages; D = max(num, 0) / den."""
        first = self.n_obs == 0
        self.num = num if first else (1.0 - self.alpha) * self.num + self.alpha * num
        self.den = den if first else (1.0 - self.alpha) * self.den + self.alpha * den
        self.D = max(self.num, 0.0) / self.den if self.den > 0 else 0.0
        self._count()

    def _count(self) -> None:
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
        return {"D": self.D, "n_obs": self.n_obs, "c": self.c, "num": self.num, "den": self.den}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`."""
        self.D, self.n_obs, self.c = float(state["D"]), int(state["n_obs"]), state["c"]
        self.num, self.den = float(state.get("num", 0.0)), float(state.get("den", 0.0))


class ImaginationGap:
    """Trust in the imagined stream from how far imagination over-promises on the anchor groups' start states.

    The calibrator learns from (predicted, real) pairs of *real* trajectories replayed in the world model; a policy
    trained in imagination finds actions whose imagined outcome is good and the real one is not, and those never
    appear among the replayed pairs. Imagining the anchor groups' start states closed-loop too, as the imagined groups
    are, shows it: gap = mean f(imagined score) - mean real outcome. An exponential average of the gap sets the
    imagined stream's weight: trust = clip(2 - gap / tolerance, 0, 1), so 1 up to ``tolerance``, 0 at twice it.
    Trust is 1 while ``tolerance`` is None (off) or nothing was observed, and it recovers when the gap closes.

    One anchor group's gap is noisy: with 8 binary outcomes the real mean alone has a standard error of ~0.17, more
    than a typical tolerance. ``z > 0`` acts on the lower confidence bound ``gap - z * se`` instead, where ``se`` is the
    average's standard error from each group's own sampling variance (``observe(gap, var)``: the variance of that
    group's mean imagined score plus that of its mean real outcome), propagated through the average's weights, so
    sampling noise alone does not turn the imagined stream down while a gap shared by the start states still does.

    Args:
        tolerance: Average gap ([0, 1] units) tolerated before the imagined stream is down-weighted; None: off.
        half_life: Half-life of the average, in observed groups.
        z: Standard errors subtracted from the average before it is compared with ``tolerance`` (0: the average
            itself, the plain rule).
    """

    def __init__(self, tolerance: float | None = None, half_life: float = 4.0, z: float = 0.0):
        if z < 0:
            raise ValueError(f"gap z must be >= 0, got {z}")
        self.tolerance = tolerance
        self.alpha = 1.0 - 0.5 ** (1.0 / half_life)
        self.z = z
        self.gap = 0.0
        self.var = 0.0  # sampling variance of the average
        self.n_obs = 0

    def observe(self, gap: float, var: float = 0.0) -> None:
        """Fold one anchor group's gap (mean calibrated imagined score - mean real outcome) and its sampling variance
        into the average."""
        if self.n_obs == 0:
            self.gap, self.var = gap, var
        else:
            self.gap = (1.0 - self.alpha) * self.gap + self.alpha * gap
            self.var = (1.0 - self.alpha) ** 2 * self.var + self.alpha**2 * var
        self.n_obs += 1

    @property
    def stderr(self) -> float:
        """Standard error of the average from the groups' sampling variances."""
        return float(np.sqrt(self.var))

    @property
    def trust(self) -> float:
        """Multiplier of the imagined stream's weights, in [0, 1]."""
        if self.tolerance is None or self.n_obs == 0:
            return 1.0
        return float(np.clip(2.0 - (self.gap - self.z * self.stderr) / self.tolerance, 0.0, 1.0))

    def state_dict(self) -> dict:
        """JSON-serialisable state."""
        return {"gap": self.gap, "var": self.var, "n_obs": self.n_obs}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`."""
        self.gap, self.n_obs = float(state["gap"]), int(state["n_obs"])
        self.var = float(state.get("var", 0.0))  # checkpoints written before the noise-aware rule have none


class ImaginationRanking:
    """Trust in the imagined stream from how well imagination *ranks* rollouts the way the simulator does.

    GRPO learns only from the within-group ranking of scores (advantages are standardised per start state). A world
    model can predict the mean outcome of a start state well, or under-promise uniformly (which the one-sided
    :class:`ImaginationGap` never flags), and still order a group's imagined rollouts at random; its imagined groups
    then feed GRPO noise at full weight (round s44, docs/rl_benchmark.md). This watches the ranking itself: given
    rollouts imagined from the anchor groups' start states whose action sequences were also replayed in the
    simulator, each group in which both the calibrated scores and the replays' outcomes vary contributes its
    group-standardised scores z_s and outcomes z_o to exponentially weighted sums, and

        rho = sum z_s z_o / sqrt(sum z_s^2 * sum z_o^2)

    is their pooled correlation (``benchmarks/imagination_fidelity.py``'s advantage correlation: 0 = no signal, 1 =
    the simulator's own advantages). trust = clip(rho / floor, 0, 1): 1 at or above ``floor``, 0 at rho <= 0. Trust is
    1 while ``floor`` is None (off) or fewer than ``min_groups`` groups were observed.

    Args:
        floor: Correlation at and above which the imagined stream keeps its full weight; None: off (still measured).
        half_life: Half-life of the sums, in observed groups.
        min_groups: Observed groups before the trust acts (one group of 8 binary outcomes is a very noisy estimate).
    """

    def __init__(self, floor: float | None = None, half_life: float = 8.0, min_groups: int = 4):
        if floor is not None and not 0.0 < floor <= 1.0:
            raise ValueError(f"rank floor must be in (0, 1] (or None: off), got {floor}")
        if not half_life > 0:
            raise ValueError(f"rank half_life must be > 0, got {half_life}")
        self.floor, self.min_groups = floor, int(min_groups)
        self.decay = 0.5 ** (1.0 / half_life)
        self.s_so = self.s_ss = self.s_oo = 0.0
        self.n_obs = 0

    def observe(self, scores: np.ndarray, outcomes: np.ndarray) -> bool:
        """Fold one group's calibrated imagined scores and its replays' outcomes (same rollouts, same order) into the
        sums; False (nothing folded) when either is constant, as a group with one outcome has no ranking to check."""
        s, o = np.asarray(scores, float), np.asarray(outcomes, float)
        if s.shape != o.shape or s.ndim != 1:
            raise ValueError(f"scores {s.shape} and outcomes {o.shape} must be matching 1-D arrays")
        if not (s.std() > 1e-9 and o.std() > 1e-9):
            return False
        z_s, z_o = (s - s.mean()) / s.std(), (o - o.mean()) / o.std()
        d = self.decay
        self.s_so = d * self.s_so + float(z_s @ z_o)
        self.s_ss = d * self.s_ss + float(z_s @ z_s)
        self.s_oo = d * self.s_oo + float(z_o @ z_o)
        self.n_obs += 1
        return True

    @property
    def corr(self) -> float:
        """The pooled within-group correlation (NaN before any group was observed)."""
        return self.s_so / np.sqrt(self.s_ss * self.s_oo) if self.n_obs else float("nan")

    @property
    def trust(self) -> float:
        """Multiplier of the imagined stream's weights, in [0, 1]."""
        if self.floor is None or self.n_obs < self.min_groups:
            return 1.0
        return float(np.clip(self.corr / self.floor, 0.0, 1.0))

    def state_dict(self) -> dict:
        """JSON-serialisable state."""
        return {"s_so": self.s_so, "s_ss": self.s_ss, "s_oo": self.s_oo, "n_obs": self.n_obs}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`."""
        self.s_so, self.s_ss, self.s_oo = (float(state[k]) for k in ("s_so", "s_ss", "s_oo"))
        self.n_obs = int(state["n_obs"])


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
