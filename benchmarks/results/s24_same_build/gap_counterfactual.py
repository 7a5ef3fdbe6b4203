"""Session 24 diagnostic: what the noise-aware imagination gap (correction.gap_z=1) would have made of the gaps a
wmrl_both run logged. Reconstructs each update's per-group gap from the logged average (half-life 2 groups) and
propagates a lower bound of each group's sampling variance: the real outcomes' binomial variance m (1 - m) / (n - 1)
of the logged anchor success (the imagined scores' own variance is not logged, so the bound's se is too small and the
counterfactual trust too low, i.e. conservative). The first logged average already holds the warm-up's 2 groups;
they are given the first anchor group's variance.

    python gap_counterfactual.py RUN_DIR [RUN_DIR ...]
"""
import glob
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TOL, HALF_LIFE, N = 0.15, 2.0, 8
alpha = 1.0 - 0.5 ** (1.0 / HALF_LIFE)
for d in sys.argv[1:]:
    acc = EventAccumulator(sorted(glob.glob(d + "/tensorboard/events*"))[-1], size_guidance={"scalars": 0})
    acc.Reload()
    ema = np.array([e.value for e in acc.Scalars("correction/imagination_gap")])
    trust = np.array([e.value for e in acc.Scalars("correction/imagination_trust")])
    succ = np.array([e.value for e in acc.Scalars("train/anchor_success")])
    var = succ * (1 - succ) / (N - 1)
    v = var[0] * (1 - alpha) ** 4 + var[0] * alpha**2 * (1 + (1 - alpha) ** 2)  # 3 groups folded in at update 1
    se = [np.sqrt(v)]
    for t in range(1, len(ema)):
        v = (1 - alpha) ** 2 * v + alpha**2 * var[t]
        se.append(np.sqrt(v))
    se = np.array(se)
    cf = np.clip(2 - (ema - se) / TOL, 0, 1)
    print(f"{d}: logged trust mean {trust.mean():.2f}, updates < 0.5: {(trust < 0.5).sum()}, == 0: {(trust == 0).sum()}"
          f" | gap_z=1 (conservative) mean {cf.mean():.2f}, < 0.5: {(cf < 0.5).sum()}, == 0: {(cf == 0).sum()}"
          f" | mean anchor imagined - real {np.mean([e.value for e in acc.Scalars('train/anchor_imagined_score')]) - succ.mean():+.3f}")
