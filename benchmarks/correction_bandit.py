"""Contextual-bandit GRPO with a learned-world-model-like reward: does WMRL reward correction pay off?

A small, fast, honest model of the situation WMRL exists for (docs/correction.md, "Benchmark"). Every design choice
is fixed here *before* looking at results; the world model was not tuned to make any arm win.

Environment (per seed)
    * K contexts (start states) x A actions (behaviour modes). True success probability P[k, a] ~ Beta(0.6, 1.2):
      most actions rarely succeed, a few per context work well (mean 0.33; best of 16 ~ 0.9).
    * A real execution returns Bernoulli(P[k, a]) -- binary success, as a simulator's success check does -- and costs 1.
    * Metric: the policy's true expected success, mean_k sum_a pi(a | k) P[k, a] (not the sampled outcomes).

World model (a learned video world model with a success head; cost ``wm_cost`` per imagined rollout, ~0)
    * Familiarity: n[k, a] = real episodes of (k, a) in the world model's training data. Offline data come from a
      behaviour policy that covers each context unevenly (Dirichlet(0.5) preferences, mildly tilted towards actions that
      work, as demonstrations are): n ~ Poisson(offline_per_context * q[k, a]). Every real (anchor) episode collected
      during training adds ``finetune_rate`` (1) to its n, standing in for fine-tuning the world model on new real
      episodes. All arms share this: a raw-WM arm also fine-tunes on its anchors. ``--finetune-rate 0`` freezes the
      world model, as the trainer's Lift default does (``wmrl.wm_finetune_every=0``): its errors then never shrink
      where the policy goes. u(n) = 1 / sqrt(1 + n / n_half) is the "unfamiliarity".
    * Member m of an M-member ensemble predicts, in logit space,
          l_m = T * (logit P + beta * u + sigma * u * (rho * z0[k, a] + sqrt(1 - rho^2) * z_m[k, a])) + eps,
      with fixed z ~ N(0, 1) (a trained network's errors are persistent, not resampled per call) and eps ~ N(0, call_sd)
      per imagined rollout (a freshly sampled video), shared by the members.
        - bias (1), over-optimism where data are scarce: +beta * u logits (model exploitation: untried actions look
          good); shared by the members, so the ensemble cannot see it;
        - bias (2), a non-affine distortion of the score scale: temperature T > 1 (over-confident, saturating
          probabilities pushed towards 0 and 1);
        - noise larger where data are scarce: sigma * u, partly shared by the members (rho), partly member-specific.
    * Prediction p = mean_m sigmoid(l_m); reported predictive variance = variance of sigmoid(l_m) across members
      (ddof 1): an ensemble-disagreement estimate that correlates with the actual error (both scale with u) but is
      itself noisy (M = 5 members) and blind to the shared error and to the optimism.

Training (identical for all arms)
    * Tabular softmax policy, GRPO: per step ``groups`` groups, each one context drawn uniformly and ``group_size``
      rollouts from pi(. | k); theta += lr * sum_i w_i A_i grad log pi(a_i | k_i) / n_valid with A and w from
      vla_wmrl.correction.RewardCorrector (the same code path for every arm).
    * The learning rate is tuned for real-only (best final reward over ``lr_grid``, same seeds) and used for every
      arm; the grid and its results are reported. Same group size, groups per step and seeds across arms.

Arms
    real_only  every group executed for real (anchor_fraction 1), no correction; runs ``steps`` steps = compute C
    raw_wm     all groups imagined; 10% (>= 1) anchor groups also executed for real and trained on the real outcome
    debias     + online monotone calibration map (toolkit default)
    denoise    + anchor-stream weight and per-sample inverse-variance weights (toolkit default weighting)
    both       + both
World-model arms run until their compute reaches ``wm_compute_fraction`` * C. Compute: real execution 1, imagined
rollout ``wm_cost`` (anchor groups are imagined too, since their (pred, real) pairs feed the calibrator).

Sensitivity sweep (``--sweep``): the same arms with a low- (``beta_low``) and a high-optimism (``beta_high``) world model;
and, at each optimism level, the reference's fixed-eps inverse-variance sample weights instead of the default
reliability weights, and the uncertainty-aware calibration (off by default); for the main world model also the
reference core (the method exactly as published: clamped calibration map, fixed-eps inverse-variance weights) and,
as a diagnostic, not a usable arm, the anchor weight given the *true* Bernoulli noise P(1 - P) of each real outcome,
which no trainer knows; and, also a diagnostic, denoising without the anchor-stream weight (w fixed at 1, per-sample
weights kept; added in session 13). A setting reruns only the arms its overrides change and reuses the others.

Metrics: true reward at C/30, C/10, C/3 and C/2 (the world-model arms' end), the area under the curve (mean reward at
61 log-spaced compute points from C/100 to C/2; it rewards speed), and paired differences to raw_wm per seed. C/30 and
the area were added in the second session, after the first had shown that the arms differ mostly early; C/3 and C/2
are the issue's comparison points.

Usage:
    python benchmarks/correction_bandit.py --out benchmarks/results/correction_bandit/
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from vla_wmrl.correction import CorrectionConfig, RewardCorrector

ARMS = {
    "real_only": dict(anchor_fraction=1.0, debias=False, denoise=False),
    "raw_wm": dict(debias=False, denoise=False),
    "debias": dict(debias=True, denoise=False),
    "denoise": dict(debias=False, denoise=True),
    "both": dict(debias=True, denoise=True),
}

# The method exactly as its reference describes it: calibration map clamped at the end knots with flat PAV segments,
# imagined samples weighted by 1 / (var + 1e-3) normalised over the step. The toolkit's defaults differ
# (docs/correction.md): the map extrapolates its end segments and is strictly increasing; the weights are reliabilities.
REFERENCE_CORE = {"calibration_extrapolate": False, "calibration_min_slope": 0.0, "sample_weighting": "inverse_variance"}
UNCERTAINTY_CALIBRATION = {"calibration_uncertainty": True}
INVERSE_VARIANCE_WEIGHTS = {"sample_weighting": "inverse_variance"}  # the reference's per-sample weights, nothing else
NO_ANCHOR_WEIGHT = {"w_target": 1.0, "w_max": 1.0}  # denoising without the anchor-stream weight (per-sample weights only)
WM_ARMS = ["raw_wm", "debias", "denoise", "both"]
FRACTIONS = {"C/30": 1 / 30, "C/10": 0.1, "C/3": 1 / 3, "C/2": 0.5}  # compute points of the table


@dataclass
class BanditConfig:
    """Benchmark settings (shared by all arms)."""

    contexts: int = 32  # K
    actions: int = 16  # A
    beta_a: float = 0.6  # P ~ Beta(beta_a, beta_b)
    beta_b: float = 1.2
    groups: int = 32  # rollout groups per step
    group_size: int = 8  # G rollouts per group
    steps: int = 300  # real-only training steps (its compute C = steps * groups * group_size)
    wm_compute_fraction: float = 0.5  # world-model arms train until compute C * this
    lr: float = 0.0  # policy learning rate for every arm; 0: tune on real-only over lr_grid
    lr_grid: str = "3,10,30,100"
    # world model
    offline_per_context: float = 64.0  # offline episodes per context (mean 4 per (context, action))
    quality_tilt: float = 1.0  # behaviour preference multiplied by (1 + tilt * P): demonstrations favour what works
    n_half: float = 4.0  # episodes of a pair that halve its error variance / shrink optimism by 1/sqrt(2)
    temperature: float = 2.0  # T > 1: over-confident, saturating probabilities
    beta: float = 2.0  # optimism (logits) on a never-seen pair
    beta_low: float = 0.5  # optimism of the low-optimism world model in --sweep
    beta_high: float = 4.0  # optimism of the high-optimism world model in --sweep
    sigma: float = 1.0  # error scale (logits) on a never-seen pair
    rho: float = 0.5  # fraction of the error shared across ensemble members (correlation)
    members: int = 5  # ensemble size M
    call_sd: float = 0.3  # per-rollout sampling noise (logits)
    finetune_rate: float = 1.0  # familiarity each real (anchor) episode adds to its pair; 0: a frozen world model
    wm_cost: float = 0.01  # compute of one imagined rollout (a real execution costs 1)
    anchor_fraction: float = 0.1  # anchor groups per step in world-model arms (>= 1)
    eval_every: int = 5  # steps between evaluations of the true expected reward


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def make_env(seed: int, cfg: BanditConfig) -> dict:
    """True success probabilities, offline familiarity counts and the world model's fixed errors for one seed."""
    rng = np.random.default_rng(seed)
    K, A = cfg.contexts, cfg.actions
    P = rng.beta(cfg.beta_a, cfg.beta_b, (K, A))
    pref = rng.dirichlet(np.full(A, 0.5), size=K) * (1.0 + cfg.quality_tilt * P)
    pref /= pref.sum(1, keepdims=True)
    n = rng.poisson(cfg.offline_per_context * pref).astype(float)
    z0 = rng.normal(0, 1, (K, A))
    zm = rng.normal(0, 1, (cfg.members, K, A))
    return {"P": P, "n": n, "z0": z0, "zm": zm, "logitP": np.log(np.clip(P, 1e-3, 1 - 1e-3) / np.clip(1 - P, 1e-3, 1))}


def world_model(env: dict, ctx: np.ndarray, acts: np.ndarray, rng: np.random.Generator, cfg: BanditConfig):
    """Imagined success probability and reported (ensemble) variance for rollouts (ctx[:, None], acts)."""
    u = 1.0 / np.sqrt(1.0 + env["n"][ctx[:, None], acts] / cfg.n_half)  # (B, G)
    shared = env["logitP"][ctx[:, None], acts] + cfg.beta * u + cfg.sigma * u * cfg.rho * env["z0"][ctx[:, None], acts]
    own = cfg.sigma * u * np.sqrt(1.0 - cfg.rho**2) * env["zm"][:, ctx[:, None], acts]  # (M, B, G)
    eps = rng.normal(0, cfg.call_sd, acts.shape)
    members = 1.0 / (1.0 + np.exp(-(cfg.temperature * (shared + own) + eps)))
    return members.mean(0), members.var(0, ddof=1)


def run_arm(
    arm: str, seed: int, cfg: BanditConfig, lr: float, corr_overrides: dict | None = None, oracle_noise: bool = False
) -> dict:
    """Train one arm on one seed; return its curve of (compute, true expected reward) and diagnostics.

    ``oracle_noise`` hands the corrector each real outcome's true noise variance P(1 - P) (a diagnostic: what the
    anchor weight would do if the outcome noise were known; no trainer knows it).
    """
    env = make_env(seed, cfg)
    env["n"] = env["n"].copy()
    P = env["P"]
    K, A, G, B = cfg.contexts, cfg.actions, cfg.group_size, cfg.groups
    rng = np.random.default_rng(seed + 10_000)
    corr = RewardCorrector(
        CorrectionConfig(**{"anchor_fraction": cfg.anchor_fraction, "min_anchors": 1, **ARMS[arm], **(corr_overrides or {})})
    )
    theta = np.zeros((K, A))
    compute, curve = 0.0, []
    budget = cfg.steps * B * G * (1.0 if arm == "real_only" else cfg.wm_compute_fraction)
    err_unfam, err_fam = [], []
    step = 0
    while True:
        if step % cfg.eval_every == 0:
            curve.append((compute, float((softmax(theta) * P).sum(1).mean())))
        if compute >= budget - 1e-9:
            break
        ctx = rng.integers(0, K, B)
        pi = softmax(theta[ctx])  # (B, A)
        cdf = np.cumsum(pi, 1)
        acts = np.minimum((rng.random((B, G))[:, :, None] > cdf[:, None, :]).sum(-1), A - 1)  # (B, G)
        anchor = corr.select_anchors(B, rng)
        if arm == "real_only":
            pred, var = np.zeros((B, G)), None
        else:
            pred, var = world_model(env, ctx, acts, rng, cfg)
            compute += cfg.wm_cost * B * G
        real = np.full((B, G), np.nan)
        pa = P[ctx[anchor][:, None], acts[anchor]]
        real[anchor] = (rng.random(pa.shape) < pa).astype(float)
        compute += anchor.sum() * G
        np.add.at(env["n"], (np.repeat(ctx[anchor], G), acts[anchor].ravel()), cfg.finetune_rate)  # fine-tuning

        real_var = None
        if oracle_noise:
            real_var = np.zeros((B, G))
            real_var[anchor] = pa * (1.0 - pa)
        out = corr.process(pred, real, anchor, pred_var=var, real_var=real_var)
        coef = out.weights * out.advantages / max(out.valid.sum(), 1)  # (B, G)
        grad = -pi * coef.sum(1, keepdims=True)  # d log pi(a) / d logits = onehot(a) - pi
        np.add.at(grad, (np.repeat(np.arange(B), G), acts.ravel()), coef.ravel())
        np.add.at(theta, ctx, lr * grad)
        step += 1
    st = corr.stats()
    return {
        "curve": curve,
        "steps": step,
        "optimum": float(P.max(1).mean()),
        "stats": {k: round(st[k], 4) for k in
                  ("fitted", "bias_removed", "anchor_weight", "disagreement", "n_pairs", "uncertainty_slope")},
    }


def first_reach(curve: np.ndarray, threshold: float) -> float | None:
    """Compute at which a (compute, reward) curve first reaches ``threshold`` (None if never)."""
    hit = np.flatnonzero(curve[:, 1] >= threshold)
    return float(curve[hit[0], 0]) if hit.size else None


def mean_curve(curves: list) -> np.ndarray:
    """Seed-mean of curves (identical compute grids across seeds, truncated to the shortest)."""
    n = min(len(c) for c in curves)
    return np.mean([np.asarray(c[:n]) for c in curves], axis=0)


def wm_diagnostics(cfg: BanditConfig, seeds: int) -> dict:
    """How wrong the world model is at the start (offline data only), on uniformly drawn (context, action) pairs."""
    rows = []
    for seed in range(seeds):
        env = make_env(seed, cfg)
        K, A = cfg.contexts, cfg.actions
        ctx = np.repeat(np.arange(K), A)[:, None].repeat(1, 1)[:, 0]
        acts = np.tile(np.arange(A), K)[:, None]
        p, v = world_model(env, ctx, acts, np.random.default_rng(seed), cfg)
        err = (p - env["P"][ctx[:, None], acts]).ravel()
        unfam = (env["n"][ctx, acts[:, 0]] == 0)
        wm_argmax = env["P"][np.arange(K), p.reshape(K, A).argmax(1)].mean()
        rows.append([err.mean(), np.abs(err).mean(), np.corrcoef(np.sqrt(v.ravel()), np.abs(err))[0, 1],
                     err[unfam].mean(), err[~unfam].mean(), unfam.mean(), wm_argmax, env["P"].max(1).mean()])
    r = np.mean(rows, 0)
    keys = ["mean_error", "mean_abs_error", "corr_reported_sd_abs_error", "mean_error_unseen_pairs",
            "mean_error_seen_pairs", "fraction_unseen_pairs", "true_reward_of_wm_argmax", "optimum"]
    return {k: float(x) for k, x in zip(keys, r)}


def at(curve, compute: float) -> float:
    """Reward of a (compute, reward) curve at the last evaluation with compute <= ``compute``."""
    curve = np.asarray(curve)
    return float(curve[np.searchsorted(curve[:, 0], compute + 1e-9, side="right") - 1, 1])


def area(curve, C: float) -> float:
    """Mean reward at 61 log-spaced compute points from C/100 to C/2 (the area under the curve on a log axis)."""
    return float(np.mean([at(curve, x) for x in np.geomspace(C / 100, C / 2, 61)]))


def run_setting(cfg: BanditConfig, seeds: int, lr: float, real_runs: list[dict], label: str,
                corr_overrides: dict | None = None, arms: list[str] | None = None, reuse: dict | None = None,
                oracle_noise: bool = False) -> dict:
    """The world-model arms on all seeds for one setting; prints the table and returns the summary.

    Args:
        arms: World-model arms to run (default all); the others are taken from ``reuse`` (the runs of a setting with
            the same world model whose overrides do not change them), as are real-only runs (they never query it).
    """
    results = {"real_only": real_runs}
    for arm in WM_ARMS:
        if arms is None or arm in arms:
            results[arm] = [run_arm(arm, s, cfg, lr, corr_overrides, oracle_noise) for s in range(seeds)]
        else:
            results[arm] = reuse[arm]
    curves = {arm: mean_curve([r["curve"] for r in runs]) for arm, runs in results.items()}
    C = curves["real_only"][-1, 0]
    real_final = curves["real_only"][-1, 1]
    real_final_seed = [r["curve"][-1][1] for r in real_runs]
    optimum = float(np.mean([r["optimum"] for r in real_runs]))
    diag = wm_diagnostics(cfg, seeds)
    print(f"\n[{label}] beta={cfg.beta} T={cfg.temperature} sigma={cfg.sigma} core overrides={corr_overrides or {}} "
          f"oracle noise={oracle_noise} seeds={seeds} lr={lr:g} optimum={optimum:.4f} real-only compute C={C:.0f}")
    print("  world model at start: " + ", ".join(f"{k}={v:.3f}" for k, v in diag.items()))
    cols = list(FRACTIONS) + ["area"]
    print(f"  {'arm':<10} " + " ".join(f"{c:>22}" for c in cols) + f" {'reach real final':>17} {'seeds':>6}"
          "   (reward, paired diff to raw_wm +- s.e.)")

    def values(runs):
        out = {name: np.array([at(r["curve"], C * f) for r in runs]) for name, f in FRACTIONS.items()}
        out["area"] = np.array([area(r["curve"], C) for r in runs])
        return out

    raw_vals = values(results["raw_wm"])
    summary = {}
    for arm, runs in results.items():
        vals = values(runs)
        finals = np.array([r["curve"][-1][1] for r in runs])
        reach = first_reach(curves[arm], real_final)
        per_seed = [first_reach(np.asarray(r["curve"]), rf) for r, rf in zip(runs, real_final_seed)]
        n_third = sum(x is not None and x <= C / 3 + 1e-9 for x in per_seed)
        entry = {
            "final_mean": round(float(finals.mean()), 5),
            "final_std": round(float(finals.std()), 5),
            "compute": float(curves[arm][-1, 0]),
            "compute_to_reach_real_final_seed_mean_curve": reach,
            "seeds_reaching_own_real_final_within_C/3": int(n_third),
            "last_stats_seed_mean": {k: round(float(np.mean([r["stats"][k] for r in runs])), 4) for k in runs[0]["stats"]},
        }
        cells = []
        for name in cols:
            v = vals[name]
            entry[f"reward_at_{name}"] = round(float(v.mean()), 5)
            entry[f"reward_at_{name}_per_seed"] = [round(float(x), 5) for x in v]
            if arm != "real_only":
                d = v - raw_vals[name]
                se = float(d.std(ddof=1) / np.sqrt(len(d)))
                entry[f"diff_vs_raw_at_{name}"] = [round(float(d.mean()), 5), round(se, 5)]
                cells.append(f"{v.mean():.4f} {d.mean():+.4f}±{se:.4f}")
            else:
                cells.append(f"{v.mean():.4f} {'':>14}")
        summary[arm] = entry
        reach_s = f"{reach / C:.2f} C" if reach is not None else "never"
        print(f"  {arm:<10} " + " ".join(f"{c:>22}" for c in cells) + f" {reach_s:>17} {n_third:>4}/{seeds}")
    b = summary["both"]
    targets = {
        f"both_beats_raw_and_each_single_at_{name}": bool(
            all(b[f"reward_at_{name}"] > summary[a][f"reward_at_{name}"] for a in ("raw_wm", "debias", "denoise"))
        )
        for name in ("C/3", "C/2", "area")
    }
    targets["both_reaches_real_final_within_C/3_seed_mean_curve"] = bool(
        b["compute_to_reach_real_final_seed_mean_curve"] is not None
        and b["compute_to_reach_real_final_seed_mean_curve"] <= C / 3 + 1e-9
    )
    targets["both_reaches_own_real_final_within_C/3_all_seeds"] = bool(
        b["seeds_reaching_own_real_final_within_C/3"] == seeds
    )
    print("  targets:", targets)
    for arm in WM_ARMS:
        print(f"  {arm:<10} end-of-run corrector stats (seed mean): "
              + ", ".join(f"{k}={v:.3f}" for k, v in summary[arm]["last_stats_seed_mean"].items()))
    grid = np.geomspace(C / 300, C, 50)  # compact curves for the JSON: seed mean and std on a log compute grid
    compact = {}
    for arm, runs in results.items():
        ys = np.array([[at(r["curve"], x) for x in grid] for r in runs])
        keep = grid <= runs[0]["curve"][-1][0] + 1e-9
        compact[arm] = {"compute": [round(float(x), 1) for x in grid[keep]],
                        "mean": [round(float(y), 4) for y in ys.mean(0)[keep]],
                        "std": [round(float(y), 4) for y in ys.std(0)[keep]]}
    return {
        "config": asdict(cfg), "core_overrides": corr_overrides or {}, "oracle_noise": oracle_noise,
        "arms_run": arms or WM_ARMS, "lr": lr, "optimum": round(optimum, 5),
        "real_only_final": round(float(real_final), 5), "real_only_final_per_seed": [round(x, 5) for x in real_final_seed],
        "real_only_compute": float(C), "world_model_at_start": {k: round(v, 4) for k, v in diag.items()},
        "summary": summary, "targets": targets, "curves": compact,
    }, results


def plot(settings: dict, path: Path, seeds: int, panels: list[str]) -> None:
    """Per optimism level (plus the reference core): seed mean +- std of every arm against compute, and below it each
    arm's seed-mean difference to raw_wm (which the std band, dominated by seed-to-seed optima, hides); the option
    settings of the same world model are overlaid as dashed/dotted 'both' curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    overlays = {"main": ["main_uncertainty_calibration", "main_known_outcome_noise"],
                "low_optimism": ["low_optimism_uncertainty_calibration"],
                "high_optimism": ["high_optimism_uncertainty_calibration"]}
    ncol = min(2, len(panels))
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(2 * nrow, ncol, figsize=(6.5 * ncol, 6.4 * nrow), squeeze=False,
                             gridspec_kw={"height_ratios": [2.2, 1] * nrow})
    colors = {"real_only": "k", "raw_wm": "tab:red", "debias": "tab:orange", "denoise": "tab:blue", "both": "tab:green"}
    for i, label in enumerate(panels):
        ax, dax = axes[2 * (i // ncol), i % ncol], axes[2 * (i // ncol) + 1, i % ncol]
        res = settings[label]
        C = res["real_only_compute"]
        for arm, c in res["curves"].items():
            x, y, sd = np.array(c["compute"]) / C, np.array(c["mean"]), np.array(c["std"])
            ax.plot(x, y, color=colors[arm], label=arm, lw=1.4)
            ax.fill_between(x, y - sd, y + sd, color=colors[arm], alpha=0.10)
        raw = np.array(res["curves"]["raw_wm"]["mean"])
        for arm in ("debias", "denoise", "both"):
            c = res["curves"][arm]
            dax.plot(np.array(c["compute"]) / C, np.array(c["mean"]) - raw, color=colors[arm], lw=1.2, label=arm)
        for extra, ls in zip(overlays.get(label, []), ("--", ":")):
            if extra in settings:
                c = settings[extra]["curves"]["both"]
                name = "both + uncertainty calibration" if "uncertainty" in extra else "both, true noise (oracle)"
                ax.plot(np.array(c["compute"]) / C, c["mean"], color="tab:green", ls=ls, lw=1.2, label=name)
                dax.plot(np.array(c["compute"]) / C, np.array(c["mean"]) - raw, color="tab:green", ls=ls, lw=1.0)
        dax.axhline(0.0, color="tab:red", lw=0.8)
        dax.axvline(1 / 3, color="grey", ls=":", lw=0.8)
        dax.set_xscale("log")
        dax.set_xlim(3e-3, 1.05)
        dax.set_ylim(-0.02, 0.05)
        dax.set_ylabel("minus raw_wm (seed mean;\nclipped at 0.05)", fontsize=7)
        ax.axhline(res["real_only_final"], color="grey", ls="--", lw=0.8, label="real-only final")
        ax.axhline(res["optimum"], color="grey", ls="-.", lw=0.6, label="optimum")
        ax.axvline(1 / 3, color="grey", ls=":", lw=0.8, label="C / 3")
        ax.set_xscale("log")
        ax.set_xlim(3e-3, 1.05)
        lo = min(min(c["mean"]) for c in res["curves"].values())
        ax.set_ylim(max(lo, res["optimum"] - 0.45), res["optimum"] + 0.02)
        ax.set_xlabel("compute / C  (C = real-only compute; real execution 1, imagined %g)" % res["config"]["wm_cost"])
        ax.set_ylabel("true expected success")
        ax.set_title(f"{label}: optimism beta={res['config']['beta']}, T={res['config']['temperature']}, "
                     f"{seeds} seeds, lr={res['lr']:g}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/correction_bandit/")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sweep", type=int, default=1, help="1: also the other optimism levels and the options")
    for field, default in asdict(BanditConfig()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args()
    cfg = BanditConfig(**{k: getattr(args, k) for k in asdict(BanditConfig())})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    # Learning rate: tuned for real-only (best final true reward, seed mean), then shared by every arm.
    grid = [cfg.lr] if cfg.lr > 0 else [float(x) for x in cfg.lr_grid.split(",")]
    real_by_lr = {lr_c: [run_arm("real_only", s, cfg, lr_c) for s in range(args.seeds)] for lr_c in grid}
    lr_grid = {lr_c: round(float(np.mean([r["curve"][-1][1] for r in runs])), 5) for lr_c, runs in real_by_lr.items()}
    lr = max(lr_grid, key=lr_grid.get)
    print("real-only lr grid (final true reward, seed mean): "
          + ", ".join(f"lr={k:g}: {v:.4f}" for k, v in lr_grid.items()) + f"  -> lr={lr:g} for every arm")
    real_runs = real_by_lr[lr]

    settings = {}
    main_label = "main" if cfg.finetune_rate == 1.0 else f"main_finetune_rate_{cfg.finetune_rate:g}"
    levels = [(main_label, cfg.beta)] + ([("low_optimism", cfg.beta_low), ("high_optimism", cfg.beta_high)] if args.sweep else [])
    for label, beta in levels:
        wm_cfg = replace(cfg, beta=beta)
        settings[label], base = run_setting(wm_cfg, args.seeds, lr, real_runs, label)
        if not args.sweep:
            continue
        if label == main_label:
            settings["main_reference_core"], _ = run_setting(
                wm_cfg, args.seeds, lr, real_runs, "main_reference_core", REFERENCE_CORE, ["debias", "denoise", "both"], base)
            settings["main_known_outcome_noise"], _ = run_setting(
                wm_cfg, args.seeds, lr, real_runs, "main_known_outcome_noise", None, ["denoise", "both"], base, True)
            settings["main_no_anchor_weight"], _ = run_setting(
                wm_cfg, args.seeds, lr, real_runs, "main_no_anchor_weight", NO_ANCHOR_WEIGHT, ["denoise", "both"], base)
        settings[f"{label}_inverse_variance_weights"], _ = run_setting(
            wm_cfg, args.seeds, lr, real_runs, f"{label}_inverse_variance_weights", INVERSE_VARIANCE_WEIGHTS,
            ["denoise", "both"], base)
        settings[f"{label}_uncertainty_calibration"], _ = run_setting(
            wm_cfg, args.seeds, lr, real_runs, f"{label}_uncertainty_calibration", UNCERTAINTY_CALIBRATION,
            ["debias", "both"], base)
    print(f"\n({time.time() - t0:.0f}s)")

    (out_dir / "results.json").write_text(
        json.dumps({"seeds": args.seeds, "lr_grid_real_only_final": lr_grid, "lr": lr, "settings": settings},
                   separators=(",", ":"))
    )
    panels = [main_label] + (["main_reference_core"] if args.sweep else []) + [label for label, _ in levels[1:]]
    plot(settings, out_dir / "reward_vs_compute.png", args.seeds, panels)
    print("wrote", out_dir / "results.json", out_dir / "reward_vs_compute.png")


if __name__ == "__main__":
    main()
