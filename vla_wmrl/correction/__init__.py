"""WMRL reward correction: online debiasing and inverse-variance denoising of world-model scores (numpy only).

Shared by the robot (VLA) trainer and the autoresearch trainer; importing it never imports torch.

Usage, once per training step::

    from vla_wmrl.correction import RewardCorrector, CorrectionConfig

    corr = RewardCorrector(CorrectionConfig(anchor_fraction=0.1, min_anchors=1, debias=True, denoise=True))
    anchor_mask = corr.select_anchors(num_groups, rng)          # (num_groups,) bool: also execute these for real
    # ... imagine all groups, execute the anchor groups for real ...
    out = corr.process(pred_scores,   # (num_groups, G) world-model score per rollout, raw units
                       real_scores,   # (num_groups, G) real outcome; read on anchor rows only (NaN elsewhere is fine)
                       anchor_mask,   # (num_groups,) bool
                       pred_var=None, # (num_groups, G) world-model predictive variance, optional
                       lengths=None,  # (num_groups, G) trajectory lengths, for normaliser='length'
                       task_ids=None, # (num_groups,) ints, for per_task calibration
                       graded=None,   # (num_groups, G) bool: world model produced a score (default all True)
                       real_graded=None,  # (num_groups, G) bool: anchor rollout has a real outcome (default True)
                       real_var=None, # (num_groups, G) known noise variance of real outcomes, optional
                       anchor_imagined=None,  # (num_groups, G) scores of rollouts imagined from anchor start states
                       anchor_imagined_outcome=None)  # (num_groups, G) real outcomes of those rollouts' replays
    out.advantages   # (num_groups, G) GRPO advantages, 0 where not valid
    out.weights      # (num_groups, G) per-sample loss weights, 0 where not valid
    out.valid        # (num_groups, G) bool, samples that contribute
    loss = -(out.weights * out.advantages * logp).sum() / max(out.valid.sum(), 1)   # e.g., in the trainer
    logger.log(corr.stats())
    json.dump(corr.state_dict(), f)      # ... later: corr.load_state_dict(json.load(f)) resumes exactly

Conventions:
    * Ungraded vs bad scores: a rollout without a score is marked with ``graded=False`` (world model) or
      ``real_graded=False`` (real outcome). It is excluded from its group, never scored 0. NaN or inf among *graded*
      scores is a bug upstream and raises ValueError naming the group.
    * Domain: raw scores are mapped linearly from ``score_range=(lo, hi)`` onto [0, 1], flipped when
      ``higher_is_better=False`` (e.g. a validation loss), so 1 is always best and positive advantages mean better.
      Scores outside the range are clipped and counted (``stats()['n_clipped']``).

Order of operations in ``process`` (one step):
    1. Map scores to [0, 1].
    2. For each anchor group: if the calibrator is fitted, fold the calibrated disagreement s2 (using the map *before*
       this step's pairs, i.e. out of sample; net of the outcome noise if it is known) into the anchor-weight average;
       then add its (pred, real[, reported sd]) pairs to the calibration buffer (which refits on its cadence). With
       ``calibration_pairs='matched'`` the pairs are instead the group's ``anchor_imagined`` scores matched by rank to
       its real outcomes (:func:`rank_matched_pairs`): scores of imagined rollouts, the kind the map is applied to.
    3. Training scores: real outcomes on anchor rows; calibrated predictions f(p) (or f(p, sd) with
       ``calibration_uncertainty``) on imagined rows (p if debias is off).
    4. A = (x - mean) / (std + 1e-4) within each group over graded rollouts; groups with < 2 graded are skipped.
    5. Weights = normaliser (1/|tau| or 1/k) x anchor weight (anchor rows) or, on imagined rows, the reliability
       1/(v + tau2) normalised to mean 1, with v the variance carried through the map and tau2 the within-group
       variance of the true scores (``sample_weighting='reliability'``, default; the reference is 1/(var + 1e-3)).
       With ``gap_tolerance`` (and ``anchor_imagined``), imagined rows are further scaled by the imagination trust
       in [0, 1] (2. folds each checked anchor group's gap into it, before this step's pairs), and dropped at 0.
       With ``rank_floor`` (and ``anchor_imagined_outcome``: the imagined rollouts' action sequences replayed for
       real) that trust is multiplied by the ranking trust (:class:`ImaginationRanking`): how well the calibrated
       imagined scores order each checked group the way the replays' outcomes do.
"""

from .advantages import group_advantages, normaliser_weights
from .anchors import num_anchors, select_anchors
from .calibrator import MonotoneCalibrator, centred_squared_error, pool_adjacent_violators
from .core import CorrectionConfig, CorrectionOutput, RewardCorrector, rank_matched_pairs, to_unit
from .denoising import (
    AnchorWeight,
    ImaginationGap,
    ImaginationRanking,
    disagreement_terms,
    inverse_variance_weights,
    normalised_disagreement,
    signal_variance,
)

__all__ = [
    "AnchorWeight",
    "CorrectionConfig",
    "ImaginationGap",
    "ImaginationRanking",
    "CorrectionOutput",
    "MonotoneCalibrator",
    "RewardCorrector",
    "centred_squared_error",
    "disagreement_terms",
    "group_advantages",
    "inverse_variance_weights",
    "normalised_disagreement",
    "normaliser_weights",
    "num_anchors",
    "pool_adjacent_violators",
    "rank_matched_pairs",
    "select_anchors",
    "signal_variance",
    "to_unit",
]
