"""Group-relative advantages (GRPO) over graded rollouts, and the per-trajectory loss normaliser."""

from __future__ import annotations

import numpy as np


ADV_SCALES = ("std", "outcome")


def group_advantages(
    scores: np.ndarray, graded: np.ndarray, eps: float = 1e-4, min_graded: int = 2, scale: str = "std"
) -> tuple[np.ndarray, np.ndarray]:
    """A = (x - mean) / (s + eps) within each group, over graded rollouts only.

    ``scale="std"`` (the reference): s is the group's standard deviation. ``scale="outcome"``, for scores that are
    success probabilities in [0, 1]: s = sqrt(mean (1 - mean)), the standard deviation of the 0/1 outcomes the scores
    stand for. For binary scores (real outcomes) the two are identical; for a world model's probabilities it keeps
    advantages on the real stream's scale: a group whose predictions all lie near 0 (say 0.001 +- 0.001) gets
    advantages near 0, where the group std would blow its noise up to +-1.

    An ungraded rollout is excluded (advantage 0, not valid): scoring it 0 would teach the policy that it failed.
    Groups with fewer than ``min_graded`` graded rollouts are skipped entirely. A group whose graded scores are all
    equal gets advantages 0 (it carries no ranking signal).

    Args:
        scores: (num_groups, G) scores; values at ungraded positions are ignored.
        graded: (num_groups, G) bool, rollouts that have a score.
        eps: Added to the group standard deviation (population std).
        min_graded: Minimum graded rollouts for a group to count.
        scale: ``std`` or ``outcome`` (see above).

    Returns:
        advantages (num_groups, G) float, 0 where not valid; valid (num_groups, G) bool.
    """
    graded = np.asarray(graded, bool)
    x = np.where(graded, np.asarray(scores, float), 0.0)
    n = graded.sum(axis=1, keepdims=True)
    keep = n >= min_graded  # (num_groups, 1)
    safe_n = np.maximum(n, 1)
    mean = x.sum(axis=1, keepdims=True) / safe_n
    if scale == "std":
        s = np.sqrt((np.where(graded, x - mean, 0.0) ** 2).sum(axis=1, keepdims=True) / safe_n)
    elif scale == "outcome":
        m = np.clip(mean, 0.0, 1.0)
        s = np.sqrt(m * (1.0 - m))
    else:
        raise ValueError(f"unknown advantage scale {scale!r}; valid: {list(ADV_SCALES)}")
    valid = graded & keep
    adv = np.where(valid, (x - mean) / (s + eps), 0.0)
    return adv, valid


def normaliser_weights(
    shape: tuple[int, int], mode: str = "constant", lengths: np.ndarray | None = None, constant: float = 1.0
) -> np.ndarray:
    """Per-sample loss factor: 1/|tau| (``mode='length'``) or 1/k (``mode='constant'``).

    The length normaliser down-weights long trajectories (often the failed ones); a constant avoids that.

    Args:
        shape: (num_groups, G).
        mode: 'length' or 'constant'.
        lengths: (num_groups, G) trajectory lengths, required for 'length'.
        constant: k for 'constant'.

    Returns:
        (num_groups, G) factors.
    """
    if mode == "constant":
        return np.full(shape, 1.0 / constant)
    if mode == "length":
        if lengths is None:
            raise ValueError("normaliser='length' needs lengths=(num_groups, G); pass them or use normaliser='constant'")
        lengths = np.asarray(lengths, float)
        if lengths.shape != tuple(shape):
            raise ValueError(f"lengths has shape {lengths.shape}, expected {tuple(shape)}")
        return 1.0 / np.maximum(lengths, 1.0)
    raise ValueError(f"unknown normaliser {mode!r}; valid: 'length', 'constant'")
