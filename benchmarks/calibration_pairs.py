"""Which (predicted, real) pairs should the debiasing calibrator learn from on a robot task?

The calibrator's map is applied to the scores of rollouts *imagined* closed-loop in the world model. By default
(``wmrl.anchor_mode=closed_loop``) it is fitted on pairs from *real* rollouts: the policy acts in the simulator and the
world model replays those actions open-loop. With ``wmrl.anchor_mode=replay`` it is fitted on imagined rollouts whose
action sequences were replayed in the simulator, i.e. on the distribution it corrects. With
``correction.calibration_pairs=matched`` (closed-loop anchors) it is fitted on the imagination check's scores (rollouts
imagined from the anchor groups' start states) matched by rank to the anchor groups' real outcomes: the right
distribution, with no replay and no extra real rollouts.

This script compares the three on the per-rollout data of ``benchmarks/imagination_fidelity.py`` (its ``real`` and
``reset`` rows), without running anything: over random halvings of the start states, a calibrator
(``vla_wmrl.correction``, the trainer's settings) is fitted on one half's pairs of either kind and applied to the other
half's imagined scores. Reported against the imagined rollouts' true (replayed) outcomes: the squared error of the
scores, and of the group advantages (``adv_scale=outcome``) against the advantages of the true outcomes (mixed groups
only), beside the raw scores and a constant.

    python benchmarks/calibration_pairs.py benchmarks/results/imagination_fidelity_onpolicy.json \
        --out benchmarks/results/calibration_pairs.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np

from vla_wmrl.correction import CorrectionConfig, RewardCorrector
from vla_wmrl.correction.advantages import group_advantages

BINS = (0.0, 0.02, 0.1, 0.3, 0.6, 1.0001)


def fit(scores: np.ndarray, outcomes: np.ndarray, cfg: CorrectionConfig, imagined: np.ndarray | None = None
        ) -> RewardCorrector:
    """A corrector whose calibrator has seen each (K, G) group as an anchor group, in order (with ``imagined``: the
    group's imagination-check scores too, which ``calibration_pairs='matched'`` pairs with the outcomes by rank)."""
    corr = RewardCorrector(cfg)
    for k, (s, o) in enumerate(zip(scores, outcomes)):
        corr.process(s[None], o[None], np.array([True]), anchor_imagined=None if imagined is None else imagined[k][None])
    return corr


def errors(scores: np.ndarray, outcomes: np.ndarray) -> tuple[float, ...]:
    """Squared error of the scores against the outcomes; of their group advantages against the true outcomes' on mixed
    groups and on all groups (an unmixed group's true advantages are 0); the mean |advantage| (the imagined stream's
    step size relative to a real group's) and the correlation of the advantages with the true ones (its direction)."""
    every = np.ones(scores.shape, bool)
    a, _ = group_advantages(scores, every, scale="outcome")
    t, _ = group_advantages(outcomes, every, scale="outcome")
    mixed = (outcomes.std(axis=1) > 0)[:, None] & every
    corr = float((a * t).sum() / np.sqrt((a * a).sum() * (t * t).sum())) if (a * a).sum() * (t * t).sum() > 0 else np.nan
    return (float(((scores - outcomes) ** 2).mean()), float(((a - t) ** 2)[mixed].mean()) if mixed.any() else np.nan,
            float(((a - t) ** 2).mean()), float(np.abs(a).mean()), corr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fidelity", help="JSON written by benchmarks/imagination_fidelity.py (rows real and reset)")
    parser.add_argument("--splits", type=int, default=200, help="random halvings of the start states")
    parser.add_argument("--min-pairs", type=int, default=32, help="pairs before the first fit (half the states' pairs "
                                                                  "must reach it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON output (default: print only)")
    args = parser.parse_args()

    rows = json.loads(Path(args.fidelity).read_text())["per_group"]
    real_s, real_o = np.array(rows["real"]["score"]), np.array(rows["real"]["outcome"])
    imag_s, imag_o = np.array(rows["reset"]["score"]), np.array(rows["reset"]["outcome"])
    cfg = CorrectionConfig(min_pairs=args.min_pairs, refit_every=16, freeze_after=8, ema_half_life=16,
                           adv_scale="outcome")
    rng = np.random.default_rng(args.seed)
    K = len(imag_s)
    matched = dataclasses.replace(cfg, calibration_pairs="matched")
    arms = ("constant (train-half mean outcome)", "raw world-model score", "calibrated: fit on real rollouts' replays",
            "calibrated: fit on imagined rollouts' replays",
            "calibrated: imagined scores matched by rank to real rollouts' outcomes")
    results = {a: [] for a in arms}
    for _ in range(args.splits):
        perm = rng.permutation(K)
        train, test = perm[: K // 2], perm[K // 2:]
        maps = [lambda x, m=imag_o[train].mean(): np.full(x.shape, m), lambda x: x,
                fit(real_s[train], real_o[train], cfg).calibrate, fit(imag_s[train], imag_o[train], cfg).calibrate,
                fit(real_s[train], real_o[train], matched, imag_s[train]).calibrate]
        for arm, f in zip(arms, maps):
            results[arm].append(errors(f(imag_s[test]), imag_o[test]))

    print(f"{K} start states x {imag_s.shape[1]} rollouts; {args.splits} random halvings (fit on one, test on the other)")
    print("| scores of held-out imagined rollouts | MSE vs true outcome | advantage MSE (mixed groups) | advantage MSE "
          "(all groups) | mean abs advantage | corr with true advantages |")
    print("|---|---|---|---|---|---|")
    summary = {}
    names = ("score_mse", "advantage_mse", "advantage_mse_all", "mean_abs_advantage", "advantage_corr")
    for arm, v in results.items():
        v = np.array(v)
        with warnings.catch_warnings():  # the constant's advantages are all 0: no correlation (NaN)
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, se = np.nanmean(v, axis=0), np.nanstd(v, axis=0) / np.sqrt(len(v))
        summary[arm] = {k: float(x) for n, m_, s_ in zip(names, mean, se) for k, x in ((n, m_), (n + "_se", s_))}
        print(f"| {arm} | {mean[0]:.4f} +- {se[0]:.4f} | " + " | ".join(f"{m_:.3f} +- {s_:.3f}" for m_, s_ in
                                                                    zip(mean[1:], se[1:])) + " |")

    print("\nTrue success rate by world-model score (why the kinds of pairs differ):")
    print("| score bin | real rollouts (WM replay score) n, success | imagined rollouts (sim replay) n, success |")
    print("|---|---|---|")
    bins = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        a, b = (real_s >= lo) & (real_s < hi), (imag_s >= lo) & (imag_s < hi)
        row = {"bin": [lo, min(hi, 1.0)], "real_n": int(a.sum()), "real_success": float(real_o[a].mean()) if a.any()
               else None, "imagined_n": int(b.sum()), "imagined_success": float(imag_o[b].mean()) if b.any() else None}
        bins.append(row)
        fmt = lambda n, x: f"{n}, {x:.2f}" if x is not None else f"{n}, -"
        print(f"| [{lo:.2f}, {min(hi, 1.0):.2f}) | {fmt(row['real_n'], row['real_success'])} | "
              f"{fmt(row['imagined_n'], row['imagined_success'])} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"source": args.fidelity, "config": vars(args), "arms": summary,
                                              "success_by_score": bins}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
