"""Anchor scheduling: which rollout groups of a step are also executed for real."""

from __future__ import annotations

import numpy as np


def num_anchors(num_groups: int, fraction: float = 0.1, min_anchors: int = 1, max_anchors: int | None = None) -> int:
    """Number of anchor groups: round(fraction * num_groups), at least ``min_anchors``, at most ``max_anchors``.

    The cap wins over the minimum: it bounds how many real executions run at once (each anchor group runs G rollouts).
    """
    n = max(int(round(fraction * num_groups)), min_anchors)
    if max_anchors is not None:
        n = min(n, max_anchors)
    return max(0, min(n, num_groups))


def select_anchors(
    num_groups: int,
    rng: np.random.Generator,
    fraction: float = 0.1,
    min_anchors: int = 1,
    max_anchors: int | None = None,
) -> np.ndarray:
    """Pick anchor groups uniformly at random.

    Args:
        num_groups: Groups in this step.
        rng: Source of randomness (the caller owns seeding).
        fraction: Target fraction of anchor groups.
        min_anchors: Minimum anchor groups per step.
        max_anchors: Cap on anchor groups per step (None: no cap).

    Returns:
        (num_groups,) bool mask, True for anchor groups.
    """
    mask = np.zeros(num_groups, bool)
    mask[rng.choice(num_groups, size=num_anchors(num_groups, fraction, min_anchors, max_anchors), replace=False)] = True
    return mask
