"""RewardCorrector: anchors + online debiasing + inverse-variance denoising + group advantages, in one object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .advantages import group_advantages, normaliser_weights
from .anchors import select_anchors
from .calibrator import MonotoneCalibrator
from .denoising import (
    AnchorWeight,
    ImaginationGap,
    ImaginationRanking,
    disagreement_terms,
    inverse_variance_weights,
    normalised_disagreement,
    signal_variance,
)


@dataclass
class CorrectionConfig:
    """Settings of :class:`RewardCorrector` (defaults: the method's reference behaviour)."""

    anchor_fraction: float = 0.1  # fraction of groups per step also executed for real
    min_anchors: int = 1  # at least this many anchor groups per step
    max_anchors: int | None = None  # cap on anchor groups per step (bounds concurrent real executions); None: no cap
    debias: bool = True  # train imagined groups on calibrated scores f(p) instead of raw p
    denoise: bool = True  # anchor-stream weight and per-sample inverse-variance weights (else all weights 1)
    per_task: bool = False  # one calibration map per task id; the pooled map serves a task until its own is fitted
    buffer_size: int = 5000  # FIFO capacity of (predicted, real) pairs per calibrator
    min_pairs: int = 200  # pairs before the first fit
    refit_every: int = 64  # new pairs between refits
    num_bins: int = 10  # equal-width calibration bins on [0, 1]
    w_target: float = 2.0  # anchor weight at the moment c is frozen
    w_max: float = 4.0  # upper clip of the anchor weight
    ema_half_life: float = 64.0  # half-life of the disagreement average D, in anchor groups
    freeze_after: int = 32  # disagreement observations before c = (w_target - 1) / D is frozen
    min_real_var: float = 1e-6  # anchor groups with Var(real) at or below this are skipped by the disagreement
    calibration_extrapolate: bool = True  # continue the end segments' slopes beyond the end knots (False: clamp)
    calibration_min_slope: float = 0.05  # blend f(p) with p so the map is strictly increasing (0: pure isotonic map)
    calibration_uncertainty: bool = False  # also learn a linear term in the WM's reported sd (needs pred_var)
    calibration_pairs: str = "rollout"  # the calibrator's (predicted, real) pairs on an anchor row: 'rollout'
    #   (reference): the world model's score of each rollout executed for real, beside its outcome; 'matched': the
    #   anchor_imagined scores (rollouts imagined from the same start state, the distribution the map corrects)
    #   matched by rank to the real outcomes (quantile matching; rows without anchor_imagined give no pairs)
    sample_weighting: str = "reliability"  # imagined-sample weights: 'reliability', 'inverse_variance' (reference),
    #   or 'shrinkage' (reliability without the mean-1 normalisation); see docs/correction.md
    var_eps: float = 1e-3  # eps in 1 / (var + eps) of 'inverse_variance', in calibrator units ([0, 1] scores)
    outcome_noise_var: float = 0.0  # known variance of a real outcome about its expectation (raw units^2); 0: exact
    adv_eps: float = 1e-4  # eps in (x - mean) / (std + eps)
    adv_scale: str = "std"  # 'std' (reference) or 'outcome': sqrt(mean (1 - mean)), for [0, 1] success scores
    normaliser: str = "constant"  # 'length' (1/|tau|, needs lengths) or 'constant' (1/normaliser_constant)
    normaliser_constant: float = 1.0  # k of the constant normaliser
    score_range: tuple[float, float] = (0.0, 1.0)  # (lo, hi) of raw scores; mapped linearly onto [0, 1]
    higher_is_better: bool = True  # False for metrics like validation loss: the map is flipped so 1 is best
    gap_tolerance: float | None = None  # imagination check (with denoise): when the calibrated score of rollouts
    #   imagined closed-loop from the anchor groups' start states exceeds their real outcome by more than this on
    #   average ([0, 1] units), the imagined stream's weight falls linearly, reaching 0 at twice it (None: off)
    gap_half_life: float = 4.0  # half-life of that average, in checked anchor groups
    gap_z: float = 0.0  # compare the average's lower confidence bound, average - gap_z * its standard error (from
    #   each checked group's sampling variance), with gap_tolerance, so outcome noise alone does not turn the imagined
    #   stream down (0: the average itself)
    rank_floor: float | None = None  # imagination ranking check (with denoise and anchor_imagined_outcome): when the
    #   pooled within-group correlation of the checked imagined rollouts' calibrated scores with their replays' real
    #   outcomes falls below this, the imagined stream's weight falls linearly, reaching 0 at correlation 0 (None: off;
    #   the correlation is still measured)
    rank_half_life: float = 8.0  # half-life of that correlation's sums, in checked groups with varied outcomes
    rank_min_groups: int = 4  # such groups before the ranking trust acts

    def __post_init__(self):
        if not 0.0 <= self.anchor_fraction <= 1.0:
            raise ValueError(f"anchor_fraction must be in [0, 1], got {self.anchor_fraction}")
        lo, hi = self.score_range
        if not hi > lo:
            raise ValueError(f"score_range must be (lo, hi) with hi > lo, got {self.score_range}")
        if self.normaliser not in ("length", "constant"):
            raise ValueError(f"unknown normaliser {self.normaliser!r}; valid: 'length', 'constant'")
        if not 1.0 <= self.w_target <= self.w_max:
            raise ValueError(f"need 1 <= w_target <= w_max, got w_target={self.w_target}, w_max={self.w_max}")
        if self.sample_weighting not in ("inverse_variance", "reliability", "shrinkage"):
            raise ValueError(
                f"unknown sample_weighting {self.sample_weighting!r}; valid: 'reliability', 'inverse_variance', "
                "'shrinkage'"
            )
        if self.calibration_pairs not in ("rollout", "matched"):
            raise ValueError(f"unknown calibration_pairs {self.calibration_pairs!r}; valid: 'rollout', 'matched'")
        if self.calibration_pairs == "matched" and self.calibration_uncertainty:
            raise ValueError("calibration_pairs='matched' pairs scores and outcomes of different rollouts, so it cannot "
                             "learn the per-rollout uncertainty term; set calibration_uncertainty=False")
        if self.adv_scale not in ("std", "outcome"):
            raise ValueError(f"unknown adv_scale {self.adv_scale!r}; valid: 'std', 'outcome'")
        if self.outcome_noise_var < 0:
            raise ValueError(f"outcome_noise_var must be >= 0, got {self.outcome_noise_var}")
        if self.gap_tolerance is not None and not self.gap_tolerance > 0:
            raise ValueError(f"gap_tolerance must be > 0 (or None: off), got {self.gap_tolerance}")
        if self.gap_z < 0:
            raise ValueError(f"gap_z must be >= 0 (0: the plain average), got {self.gap_z}")
        if self.rank_floor is not None and not 0.0 < self.rank_floor <= 1.0:
            raise ValueError(f"rank_floor must be in (0, 1] (or None: off), got {self.rank_floor}")


@dataclass
class CorrectionOutput:
    """Result of :meth:`RewardCorrector.process`; all arrays are (num_groups, G)."""

    advantages: np.ndarray  # standardised within group; 0 where not valid
    weights: np.ndarray  # per-sample loss weights (normaliser x anchor weight or inverse-variance weight); 0 where not valid
    valid: np.ndarray  # bool, samples that contribute to the loss
    scores: np.ndarray  # the [0, 1] scores advantages were computed from: real on anchor rows, f(p) (or p) elsewhere


def to_unit(x: np.ndarray, score_range: tuple[float, float] = (0.0, 1.0), higher_is_better: bool = True):
    """Map raw scores onto the calibrator's [0, 1] domain (1 = best), clipping what falls outside.

    Args:
        x: Raw scores (any shape); non-finite values pass through unchanged (callers mask them).
        score_range: (lo, hi) of the raw scores.
        higher_is_better: If False (e.g. a loss), lo maps to 1 and hi to 0.

    Returns:
        (unit scores, number of finite entries that were clipped).
    """
    lo, hi = score_range
    u = (np.asarray(x, float) - lo) / (hi - lo)
    if not higher_is_better:
        u = 1.0 - u
    with np.errstate(invalid="ignore"):
        outside = np.isfinite(u) & ((u < 0.0) | (u > 1.0))
    return np.where(outside, np.clip(u, 0.0, 1.0), u), int(outside.sum())


def rank_matched_pairs(imagined: np.ndarray, real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantile-matched (predicted, real) pairs of one start state: the k-th smallest real outcome beside the same
    quantile of the imagined rollouts' scores.

    The imagined and the real rollouts are different draws of the same policy from the same start state, so no score
    belongs to an outcome; if the world model ranks rollouts correctly, the monotone map from scores to outcomes is
    the one that carries the scores' distribution onto the outcomes' (the quantile map), and pooling these pairs over
    many start states estimates it. Unlike pairs of real rollouts scored by the world model, the scores come from the
    distribution the map is applied to (imagined rollouts); unlike replaying imagined actions, it needs no
    deterministic simulator.

    Args:
        imagined: (n_i,) [0, 1] scores of the rollouts imagined from the start state.
        real: (n_r,) [0, 1] real outcomes from it.

    Returns:
        (n_r,) predicted and (n_r,) real arrays, both ascending.
    """
    real = np.sort(np.asarray(real, float))
    q = (np.arange(real.size) + 0.5) / max(real.size, 1)
    return np.quantile(np.asarray(imagined, float), q, method="inverted_cdf"), real


def _check_finite(name: str, x: np.ndarray, mask: np.ndarray) -> None:
    bad = mask & ~np.isfinite(x)
    if bad.any():
        groups = np.flatnonzero(bad.any(axis=1))
        raise ValueError(
            f"{name} has NaN/inf in graded rollouts of group {int(groups[0])} (groups {groups.tolist()}); "
            "mark rollouts without a score with graded=False / real_graded=False instead"
        )


def _check_var(name: str, var: np.ndarray, mask: np.ndarray) -> None:
    _check_finite(name, var, mask)
    if (var[mask] < 0).any():
        raise ValueError(f"{name} must be non-negative")


class RewardCorrector:
    """Turns world-model and real scores of rollout groups into corrected GRPO advantages and loss weights.

    See the package docstring for the calling convention and the order of operations in :meth:`process`.

    Args:
        config: Settings; ``CorrectionConfig()`` is the reference behaviour.
    """

    def __init__(self, config: CorrectionConfig | None = None):
        self.config = config or CorrectionConfig()
        cfg = self.config
        self._make_calibrator = lambda: MonotoneCalibrator(
            cfg.buffer_size, cfg.min_pairs, cfg.refit_every, cfg.num_bins, cfg.calibration_uncertainty
        )
        self.calibrator = self._make_calibrator()  # pooled over all tasks
        self.task_calibrators: dict[int, MonotoneCalibrator] = {}
        self.anchor_weight = AnchorWeight(cfg.w_target, cfg.w_max, cfg.ema_half_life, cfg.freeze_after)
        self.gap = ImaginationGap(cfg.gap_tolerance, cfg.gap_half_life, cfg.gap_z)
        self.ranking = ImaginationRanking(cfg.rank_floor, cfg.rank_half_life, cfg.rank_min_groups)
        self.n_steps = 0
        self.n_clipped_total = 0
        self._last: dict[str, float] = {}

    # ----------------------------------------------------------------------------------------------------- anchors
    def select_anchors(self, num_groups: int, rng: np.random.Generator) -> np.ndarray:
        """(num_groups,) bool mask of the groups to also execute for real this step."""
        cfg = self.config
        return select_anchors(num_groups, rng, cfg.anchor_fraction, cfg.min_anchors, cfg.max_anchors)

    # ------------------------------------------------------------------------------------------------ calibration
    def calibrator_for(self, task_id: int | None) -> MonotoneCalibrator:
        """The map used for a task: its own once fitted (``per_task``), else the pooled one."""
        own = self.task_calibrators.get(int(task_id)) if task_id is not None else None
        return own if own is not None and own.fitted else self.calibrator

    def calibrate(
        self, unit_scores: np.ndarray, task_id: int | None = None, unit_sd: np.ndarray | None = None
    ) -> np.ndarray:
        """Apply the debiasing map to [0, 1] scores (identity if ``debias`` is off or nothing is fitted yet).

        Args:
            unit_scores: Scores in [0, 1] (see :func:`to_unit`).
            task_id: Task of these scores (``per_task``).
            unit_sd: The world model's reported standard deviation of each score in [0, 1] units, used by the learned
                uncertainty term (``calibration_uncertainty``); None: no such term.
        """
        unit_scores = np.asarray(unit_scores, float)
        cfg = self.config
        if not cfg.debias:
            return unit_scores.copy()
        cal = self.calibrator_for(task_id)
        return cal(unit_scores, cfg.calibration_extrapolate, cfg.calibration_min_slope, unit_sd)

    def _map_slope(self, unit_scores: np.ndarray, task_id: int | None = None) -> np.ndarray:
        """d f / d p of the debiasing map (1 when debiasing is off or nothing is fitted)."""
        if not self.config.debias:
            return np.ones(np.shape(unit_scores))
        cfg = self.config
        return self.calibrator_for(task_id).slope(unit_scores, cfg.calibration_extrapolate, cfg.calibration_min_slope)

    @property
    def imagination_trust(self) -> float:
        """Current multiplier of the imagined stream's weights: the imagination gap's trust times the ranking's (1
        unless ``denoise`` and ``gap_tolerance`` or ``rank_floor`` are on); at 0 a trainer may skip imagining the
        non-anchor groups, which would be dropped."""
        return self.gap.trust * self.ranking.trust if self.config.denoise else 1.0

    # ---------------------------------------------------------------------------------------------------- process
    def process(
        self,
        pred_scores: np.ndarray,
        real_scores: np.ndarray | None,
        anchor_mask: np.ndarray,
        pred_var: np.ndarray | None = None,
        lengths: np.ndarray | None = None,
        task_ids: np.ndarray | None = None,
        graded: np.ndarray | None = None,
        real_graded: np.ndarray | None = None,
        real_var: np.ndarray | None = None,
        anchor_imagined: np.ndarray | None = None,
        anchor_imagined_outcome: np.ndarray | None = None,
    ) -> CorrectionOutput:
        """Correct one step's scores and return advantages, weights and the valid mask.

        Args:
            pred_scores: (num_groups, G) world-model scores, raw units (see ``score_range``).
            real_scores: (num_groups, G) real outcomes, raw units; read on anchor rows only (anything elsewhere,
                e.g. NaN). May be None when no group is an anchor.
            anchor_mask: (num_groups,) bool, groups also executed for real.
            pred_var: (num_groups, G) world-model predictive variance in raw units squared, or None.
            lengths: (num_groups, G) trajectory lengths, for ``normaliser='length'``.
            task_ids: (num_groups,) ints, for ``per_task`` calibration.
            graded: (num_groups, G) bool, rollouts the world model scored (default all True).
            real_graded: (num_groups, G) bool, anchor rollouts with a real outcome (default all True on anchor rows).
            real_var: (num_groups, G) known variance of each real outcome about its expectation, raw units squared;
                read on anchor rows only; None: ``outcome_noise_var`` for every outcome.
            anchor_imagined: (num_groups, G) world-model scores, raw units, of rollouts *imagined* (closed loop, as
                the imagined groups are) from the anchor groups' start states; read on anchor rows that are all
                finite (NaN rows are unchecked), never trained on. Their calibrated mean minus the real mean is the
                imagination gap (``gap_tolerance``): the over-optimism that (predicted, real) pairs of replayed real
                trajectories cannot show, e.g. a policy exploiting the world model.
            anchor_imagined_outcome: (num_groups, G) real outcomes, raw units, of the ``anchor_imagined`` rollouts
                (their action sequences replayed in the simulator), same order; read on checked rows that are all
                finite. Each such row's calibrated scores and outcomes feed the ranking check (``rank_floor``).

        Returns:
            CorrectionOutput with advantages, weights, valid and the scores used.

        Raises:
            ValueError: On shape mismatches, or NaN/inf among graded scores (the message names the group).
        """
        cfg = self.config
        pred = np.asarray(pred_scores, float)
        if pred.ndim != 2:
            raise ValueError(f"pred_scores must be (num_groups, G), got shape {pred.shape}")
        num_groups, _ = pred.shape
        anchor = np.asarray(anchor_mask, bool).reshape(-1)
        if anchor.shape != (num_groups,):
            raise ValueError(f"anchor_mask has shape {anchor.shape}, expected ({num_groups},)")
        real = np.full(pred.shape, np.nan) if real_scores is None else np.asarray(real_scores, float)
        graded = np.ones(pred.shape, bool) if graded is None else np.asarray(graded, bool)
        real_graded = np.ones(pred.shape, bool) if real_graded is None else np.asarray(real_graded, bool)
        for name, arr in (("real_scores", real), ("graded", graded), ("real_graded", real_graded)):
            if arr.shape != pred.shape:
                raise ValueError(f"{name} has shape {arr.shape}, expected {pred.shape}")
        real_graded = real_graded & anchor[:, None]  # real outcomes exist only on anchor rows
        tasks = [None] * num_groups if task_ids is None else [int(t) for t in np.asarray(task_ids).reshape(-1)]
        if len(tasks) != num_groups:
            raise ValueError(f"task_ids has {len(tasks)} entries, expected {num_groups}")
        _check_finite("pred_scores", pred, graded)
        _check_finite("real_scores", real, real_graded)
        lo, hi = cfg.score_range
        paired = graded & real_graded
        var = None if pred_var is None else np.asarray(pred_var, float)
        if var is not None and var.shape != pred.shape:
            raise ValueError(f"pred_var has shape {var.shape}, expected {pred.shape}")
        sd_u = None  # world model's reported sd in [0, 1] units, for the calibrator's uncertainty term
        if var is not None and cfg.calibration_uncertainty:
            _check_var("pred_var", var, graded)
            sd_u = np.sqrt(np.where(graded, var, 0.0)) / (hi - lo)
        noise_u = None  # known outcome-noise variance in [0, 1] units; None: outcomes taken as exact (reference)
        if cfg.outcome_noise_var > 0:
            noise_u = np.full(pred.shape, cfg.outcome_noise_var / (hi - lo) ** 2)
        if real_var is not None:
            rv = np.asarray(real_var, float)
            if rv.shape != pred.shape:
                raise ValueError(f"real_var has shape {rv.shape}, expected {pred.shape}")
            _check_var("real_var", rv, real_graded)
            noise_u = np.where(real_graded, rv, 0.0) / (hi - lo) ** 2

        # 1. Raw units -> [0, 1] (1 = best); out-of-domain scores are clipped and counted.
        # NaN at ungraded positions keeps them out of the clip count (to_unit counts finite entries only).
        u_pred, clipped_p = to_unit(np.where(graded, pred, np.nan), cfg.score_range, cfg.higher_is_better)
        u_real, clipped_r = to_unit(np.where(real_graded, real, np.nan), cfg.score_range, cfg.higher_is_better)
        n_clipped = clipped_p + clipped_r

        imag_check, checked = None, np.zeros(num_groups, bool)
        if anchor_imagined is not None:
            imag_check = np.asarray(anchor_imagined, float)
            if imag_check.ndim != 2 or imag_check.shape[0] != num_groups:
                raise ValueError(f"anchor_imagined has shape {imag_check.shape}, expected ({num_groups}, n)")
            finite = np.isfinite(imag_check)
            checked = anchor & finite.all(axis=1) & real_graded.any(axis=1)  # anchor rows with a whole check row
            partial = anchor & ~finite.all(axis=1) & finite.any(axis=1)
            if partial.any():
                group = int(np.flatnonzero(partial)[0])
                raise ValueError(f"anchor_imagined has NaN/inf in part of anchor group {group}; give a whole row or "
                                 "none (all NaN)")
            imag_check, _ = to_unit(imag_check, cfg.score_range, cfg.higher_is_better)
        imag_outcome, ranked = None, np.zeros(num_groups, bool)
        if anchor_imagined_outcome is not None:
            if imag_check is None:
                raise ValueError("anchor_imagined_outcome needs anchor_imagined (the scores of the same rollouts)")
            imag_outcome = np.asarray(anchor_imagined_outcome, float)
            if imag_outcome.shape != imag_check.shape:
                raise ValueError(f"anchor_imagined_outcome has shape {imag_outcome.shape}, expected {imag_check.shape} "
                                 "(one outcome per anchor_imagined rollout)")
            ranked = checked & np.isfinite(imag_outcome).all(axis=1)
            imag_outcome, _ = to_unit(imag_outcome, cfg.score_range, cfg.higher_is_better)

        # 2. Anchor groups: disagreement and imagination gap under the current map (out of sample), then feed the
        # calibrators.
        n_pairs_step = 0
        for i in np.flatnonzero(anchor):
            if checked[i]:
                f_imag = self.calibrate(imag_check[i], tasks[i])
                r_i = u_real[i, real_graded[i]]
                sampling_var = sum(float(x.var(ddof=1)) / x.size for x in (f_imag, r_i) if x.size > 1)
                self.gap.observe(float(f_imag.mean() - r_i.mean()), sampling_var)
                if ranked[i]:
                    self.ranking.observe(f_imag, imag_outcome[i])
            m = paired[i]
            sd_i = None if sd_u is None else sd_u[i, m]
            if m.any() and self.calibrator_for(tasks[i]).fitted:  # the anchor weight stays exactly 1 before calibration
                f_i = self.calibrate(u_pred[i, m], tasks[i], sd_i)
                if noise_u is None:  # reference: average of per-group ratios, constant-outcome groups skipped
                    s2 = normalised_disagreement(f_i, u_real[i, m], cfg.min_real_var)
                    if s2 is not None:
                        self.anchor_weight.observe(s2)
                else:  # known noise: ratio of averages over all groups (no selection on Var(r) > 0)
                    terms = disagreement_terms(f_i, u_real[i, m], noise_u[i, m])
                    if terms is not None:
                        self.anchor_weight.observe_terms(*terms)
            if cfg.calibration_pairs == "matched":
                if not checked[i]:
                    continue
                p_i, r_i = rank_matched_pairs(imag_check[i], u_real[i, real_graded[i]])
                sd_i = None  # no score belongs to an outcome (calibration_uncertainty is refused with matched pairs)
            elif m.any():
                p_i, r_i = u_pred[i, m], u_real[i, m]
            else:
                continue
            self.calibrator.add(p_i, r_i, sd_i)
            if cfg.per_task and tasks[i] is not None:
                self.task_calibrators.setdefault(tasks[i], self._make_calibrator()).add(p_i, r_i, sd_i)
            n_pairs_step += int(r_i.size)

        # 3. Training scores: real outcomes on anchor rows, calibrated predictions on imagined rows.
        scores = u_real.copy()
        imagined_rows = np.flatnonzero(~anchor)
        if cfg.per_task:
            for i in imagined_rows:
                scores[i] = self.calibrate(u_pred[i], tasks[i], None if sd_u is None else sd_u[i])
        else:  # one pooled map: a single vectorised call
            scores[imagined_rows] = self.calibrate(u_pred[imagined_rows], None, None if sd_u is None else sd_u[imagined_rows])
        score_mask = np.where(anchor[:, None], real_graded, graded)

        # 4. Group advantages over graded rollouts only.
        adv, valid = group_advantages(scores, score_mask, cfg.adv_eps, scale=cfg.adv_scale)

        # 5. Weights: normaliser x (anchor-stream weight | normalised inverse variance).
        weights = normaliser_weights(pred.shape, cfg.normaliser, lengths, cfg.normaliser_constant)
        w_anchor = self.anchor_weight.weight if cfg.denoise else 1.0
        weights[anchor] *= w_anchor
        imagined = valid & ~anchor[:, None]
        signal_var = float("nan")
        if cfg.denoise and var is not None:
            _check_var("pred_var", var, imagined)
            v, eps = np.where(imagined, var, 0.0) / (hi - lo) ** 2, cfg.var_eps
            if cfg.sample_weighting in ("reliability", "shrinkage"):
                # The score trained on is f(p): carry the variance through the map (delta method), and use the
                # within-group spread of true scores as the eps (a sample much surer than that spread is as good as
                # a noiseless one); see denoising.signal_variance.
                slope = np.ones(pred.shape)
                if cfg.per_task:
                    for i in imagined_rows:
                        slope[i] = self._map_slope(np.nan_to_num(u_pred[i]), tasks[i])
                elif imagined_rows.size:
                    slope[imagined_rows] = self._map_slope(np.nan_to_num(u_pred[imagined_rows]))
                v = np.where(imagined, v * slope**2, 0.0)
                signal_var = signal_variance(scores, v, imagined)
                eps = max(signal_var, 1e-8)  # the floor only guards a zero estimate
            if cfg.sample_weighting == "shrinkage":
                w_img = np.where(imagined, eps / (v + eps), 0.0)
            else:
                w_img = inverse_variance_weights(v, imagined, eps)
            weights *= np.where(anchor[:, None], 1.0, w_img)
        trust = self.imagination_trust
        if trust < 1.0:
            weights[~anchor] *= trust
            if trust == 0.0:  # the imagined stream is off: the step is the anchor groups' alone
                valid = valid & anchor[:, None]
                adv = np.where(valid, adv, 0.0)
        weights = np.where(valid, weights, 0.0)

        self.n_steps += 1
        self.n_clipped_total += n_clipped
        groups_with_scores = score_mask.any(axis=1)
        self._last = {
            "anchor_fraction": float(anchor.mean()) if num_groups else 0.0,
            "num_anchor_groups": float(anchor.sum()),
            "n_pairs_step": float(n_pairs_step),
            "n_clipped": float(n_clipped),
            "n_ungraded": float((~score_mask).sum()),
            "n_skipped_groups": float((groups_with_scores & ~valid.any(axis=1)).sum()),
            "n_valid": float(valid.sum()),
        }
        if cfg.denoise and cfg.sample_weighting != "inverse_variance":
            self._last["signal_var"] = signal_var  # NaN when no pred_var was given
        return CorrectionOutput(advantages=adv, weights=weights, valid=valid, scores=np.where(score_mask, scores, np.nan))

    # ------------------------------------------------------------------------------------------------ logging/state
    def stats(self) -> dict[str, float]:
        """Floats for logging: last step's anchor fraction/clipping/skips, calibration and denoising state."""
        aw = self.anchor_weight
        out = dict(self._last)
        out.update(
            {
                "fitted": float(self.calibrator.fitted),
                "n_fits": float(self.calibrator.n_fits),
                "n_pairs": float(self.calibrator.pred.size),
                "bias_removed": float(self.calibrator.bias_removed),
                "uncertainty_slope": float(self.calibrator.sd_slope),
                "anchor_weight": float(aw.weight if self.config.denoise else 1.0),
                "imagination_gap": float(self.gap.gap),
                "imagination_gap_se": self.gap.stderr,
                "imagination_trust": self.imagination_trust,
                "n_gap_obs": float(self.gap.n_obs),
                "imagination_rank_corr": float(self.ranking.corr),
                "imagination_rank_trust": self.ranking.trust if self.config.denoise else 1.0,
                "n_rank_obs": float(self.ranking.n_obs),
                "disagreement": float(aw.D),
                "n_disagreement_obs": float(aw.n_obs),
                "c_frozen": float(aw.c is not None),
                "n_clipped_total": float(self.n_clipped_total),
                "n_steps": float(self.n_steps),
            }
        )
        if self.config.per_task:
            out["n_tasks_fitted"] = float(sum(c.fitted for c in self.task_calibrators.values()))
        return out

    def state_dict(self) -> dict:
        """JSON-serialisable state; ``load_state_dict`` on a corrector with the same config resumes exactly."""
        return {
            "config": dataclasses.asdict(self.config),  # for reference; the constructor's config is what is used
            "calibrator": self.calibrator.state_dict(),
            "task_calibrators": {str(t): c.state_dict() for t, c in self.task_calibrators.items()},
            "anchor_weight": self.anchor_weight.state_dict(),
            "imagination_gap": self.gap.state_dict(),
            "imagination_ranking": self.ranking.state_dict(),
            "n_steps": self.n_steps,
            "n_clipped_total": self.n_clipped_total,
            "last": dict(self._last),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict` (e.g. after ``json.loads``)."""
        self.calibrator.load_state_dict(state["calibrator"])
        self.task_calibrators = {}
        for t, s in state["task_calibrators"].items():
            self.task_calibrators[int(t)] = cal = self._make_calibrator()
            cal.load_state_dict(s)
        self.anchor_weight.load_state_dict(state["anchor_weight"])
        if "imagination_gap" in state:
            self.gap.load_state_dict(state["imagination_gap"])
        if "imagination_ranking" in state:  # states written before the ranking check have none
            self.ranking.load_state_dict(state["imagination_ranking"])
        self.n_steps, self.n_clipped_total = int(state["n_steps"]), int(state["n_clipped_total"])
        self._last = {k: float(v) for k, v in state["last"].items()}
