"""Contextual-bandit GRPO with a biased, noisy "world model" reward: does WMRL reward correction pay off?

Setting (per seed):
    * K contexts, A actions, true mean reward R[k, a] ~ U(0, 1). A real evaluation returns
      clip(R[k, a] + N(0, real_noise), 0, 1) and costs 1.
    * The world model returns p = clip(h(R[k, a]) + e[k, a] + N(0, call_noise), 0, 1) and costs ``wm_cost`` (~0).
      h is a monotone non-affine bias (``--bias``); e[k, a] = s[k, a] z[k, a] is a persistent per-pair error (fixed
      z ~ N(0, 1)) whose scale s = wm_noise / sqrt(1 + n[k, a] / n0) shrinks as the world model sees real executions
      of that pair (offline data counts n are skewed, so rarely seen actions are the noisy ones; every real execution
      during training adds to n, as if the world model were fine-tuned on it). The world model reports its own
      variance s^2 + call_noise^2, so the per-sample variance is informative.
    * Policy: tabular softmax, GRPO update theta += lr * sum_i w_i A_i grad log pi(a_i | k_i) / n_valid, the same
      learning rate, batch (groups x G) and seeds for every arm.

Arms (all through vla_wmrl.correction.RewardCorrector):
    real_only  every group executed for real (anchor_fraction 1), no correction
    raw_wm     imagined groups + 10% real anchor groups mixed, no calibration, anchor weight 1
    debias     + online calibration map
    denoise    + anchor-stream weight and inverse-variance sample weights
    both       + both

Real-only runs ``--steps`` steps (its compute C); world-model arms run until their compute reaches C / 2.

Usage:
    python benchmarks/correction_bandit.py --out benchmarks/results/correction_bandit/
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
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

BIASES = {
    # the toy grader of the design notes (nearly affine on [0, 1])
    "toy": lambda r: 0.25 + 0.55 * r + 0.2 * r**2,
    # an over-confident grader: squashes scores towards 0 / 1, compressing differences among good actions
    "overconfident": lambda r: 1.0 / (1.0 + np.exp(-8.0 * (r - 0.5))),
}


@dataclass
class BanditConfig:
    """Benchmark settings (shared by all arms)."""

    contexts: int = 32  # K
    actions: int = 16  # A
    groups: int = 32  # rollout groups per step (one context each, drawn uniformly)
    group_size: int = 8  # G rollouts per group
    steps: int = 300  # real-only training steps (defines its compute C)
    wm_compute_fraction: float = 0.5  # world-model arms train until compute C * this
    lr: float = 10.0  # policy learning rate (same for all arms)
    real_noise: float = 0.1  # std of a real evaluation around R
    wm_noise: float = 0.2  # scale of the world model's persistent per-pair error with no data
    call_noise: float = 0.03  # per-call world-model noise
    n0: float = 1.0  # real executions of a pair that halve its error variance
    offline_mean: float = 4.0  # mean offline count per (context, action); skewed across actions
    wm_cost: float = 0.01  # compute cost of one world-model evaluation (a real one costs 1)
    anchor_fraction: float = 0.1  # anchor groups per step in world-model arms
    bias: str = "toy"  # key of BIASES
    sample_var: int = 1  # 1: pass the world model's per-sample variance to the corrector (denoise arms); 0: anchor weight only
    eval_every: int = 5  # steps between evaluations of the true expected reward


def run_arm(arm: str, seed: int, cfg: BanditConfig) -> dict:
    """Train one arm on one seed; return its curve of (compute, true expected reward)."""
    env_rng = np.random.default_rng(seed)  # same environment and world-model errors for every arm
    K, A, G, B = cfg.contexts, cfg.actions, cfg.group_size, cfg.groups
    R = env_rng.uniform(0, 1, (K, A))
    z = env_rng.normal(0, 1, (K, A))
    skew = env_rng.dirichlet(np.full(A, 0.5), size=K) * A  # offline data favours a few actions per context
    n_seen = env_rng.poisson(cfg.offline_mean * skew).astype(float)
    h = BIASES[cfg.bias]
    rng = np.random.default_rng(seed + 10_000)  # training randomness (same stream start for every arm)

    corr = RewardCorrector(
        CorrectionConfig(**{"anchor_fraction": cfg.anchor_fraction, "min_anchors": 1, **ARMS[arm]})
    )
    theta = np.zeros((K, A))
    compute, curve = 0.0, []
    budget = cfg.steps * B * G * (1.0 if arm == "real_only" else cfg.wm_compute_fraction)

    def true_reward() -> float:
        pi = np.exp(theta - theta.max(1, keepdims=True))
        pi /= pi.sum(1, keepdims=True)
        return float((pi * R).sum(1).mean())

    step = 0
    while True:
        if step % cfg.eval_every == 0:
            curve.append((compute, true_reward()))
        if compute >= budget:
            break
        ctx = rng.integers(0, K, B)
        logits = theta[ctx]
        pi = np.exp(logits - logits.max(1, keepdims=True))
        pi /= pi.sum(1, keepdims=True)
        acts = np.stack([rng.choice(A, G, p=pi[i]) for i in range(B)])  # (B, G)
        mean_r = R[ctx[:, None], acts]
        anchor = corr.select_anchors(B, rng)
        if arm == "real_only":
            pred, var = np.zeros((B, G)), None
        else:
            s = cfg.wm_noise / np.sqrt(1.0 + n_seen[ctx[:, None], acts] / cfg.n0)
            pred = np.clip(
                h(mean_r) + s * z[ctx[:, None], acts] + rng.normal(0, cfg.call_noise, (B, G)), 0.0, 1.0
            )
            var = s**2 + cfg.call_noise**2
            compute += cfg.wm_cost * B * G  # every group is imagined (anchors too: their pairs feed the calibrator)
        real = np.full((B, G), np.nan)
        real[anchor] = np.clip(mean_r[anchor] + rng.normal(0, cfg.real_noise, mean_r[anchor].shape), 0.0, 1.0)
        compute += anchor.sum() * G
        np.add.at(n_seen, (np.repeat(ctx[anchor], G), acts[anchor].ravel()), 1.0)  # world model fine-tuned on them

        out = corr.process(pred, real, anchor, pred_var=var if cfg.sample_var else None)
        # GRPO step: grad of sum_i w_i A_i log pi(a_i | k_i), averaged over contributing samples.
        coef = out.weights * out.advantages / max(out.valid.sum(), 1)  # (B, G)
        grad_logits = -pi * coef.sum(1, keepdims=True)  # d log pi(a) / d logits = onehot(a) - pi
        np.add.at(grad_logits, (np.repeat(np.arange(B), G), acts.ravel()), coef.ravel())
        np.add.at(theta, ctx, cfg.lr * grad_logits)
        step += 1
    return {"curve": curve, "stats": corr.stats(), "optimum": float(R.max(1).mean()), "steps": step}


def first_reach(curve: np.ndarray, threshold: float) -> float | None:
    """Compute at which a (compute, reward) curve first reaches ``threshold`` (None if never)."""
    hit = np.flatnonzero(curve[:, 1] >= threshold)
    return float(curve[hit[0], 0]) if hit.size else None


def mean_curve(curves: list) -> np.ndarray:
    """Seed-mean of curves (equal compute grids across seeds, truncated to the shortest)."""
    n = min(len(c) for c in curves)
    return np.mean([np.asarray(c[:n]) for c in curves], axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/correction_bandit/")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of arms (real_only is always run)")
    for field, default in asdict(BanditConfig()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args()
    cfg = BanditConfig(**{k: getattr(args, k) for k in asdict(BanditConfig())})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    arms = ["real_only"] + [a for a in args.arms.split(",") if a in ARMS and a != "real_only"]
    results = {arm: [run_arm(arm, seed, cfg) for seed in range(args.seeds)] for arm in arms}
    curves = {arm: mean_curve([r["curve"] for r in runs]) for arm, runs in results.items()}
    real_final = curves["real_only"][-1, 1]
    real_compute = curves["real_only"][-1, 0]
    optimum = float(np.mean([r["optimum"] for r in results["real_only"]]))

    summary = {}
    header = f"{'arm':<10} {'final true reward':>20} {'compute':>9} {'reward @ C/3':>13} {'compute to reach real-only final':>33}"
    print(f"bias={cfg.bias}  seeds={args.seeds}  optimum={optimum:.4f}  real-only compute C={real_compute:.0f}")
    print(header)
    for arm, runs in results.items():
        finals = np.array([r["curve"][-1][1] for r in runs])
        c = curves[arm]
        at_third = c[np.searchsorted(c[:, 0], real_compute / 3, side="right") - 1, 1]
        reach = first_reach(c, real_final)
        per_seed = [first_reach(np.asarray(r["curve"]), real_final) for r in runs]
        summary[arm] = {
            "final_mean": float(finals.mean()),
            "final_std": float(finals.std()),
            "compute": float(c[-1, 0]),
            "reward_at_third_of_real_compute": float(at_third),
            "compute_to_reach_real_final": reach,
            "compute_to_reach_real_final_per_seed": per_seed,
            "last_stats": [r["stats"] for r in runs],
        }
        reach_s = f"{reach:.0f} ({reach / real_compute:.2f} C)" if reach is not None else "never"
        print(f"{arm:<10} {finals.mean():>12.4f} ± {finals.std():.4f} {c[-1, 0]:>9.0f} {at_third:>13.4f} {reach_s:>33}")
    targets = {}
    if set(ARMS) <= set(summary):
        both = summary["both"]
        targets = {
            "both_beats_raw_and_singles_at_equal_compute": bool(
                all(both["final_mean"] > summary[a]["final_mean"] for a in ("raw_wm", "debias", "denoise"))
            ),
            "both_reaches_real_final_within_third": bool(
                both["compute_to_reach_real_final"] is not None
                and both["compute_to_reach_real_final"] <= real_compute / 3
            ),
        }
    print("targets:", targets, f"({time.time() - t0:.0f}s)")

    (out_dir / "results.json").write_text(
        json.dumps(
            {
                "config": asdict(cfg),
                "seeds": args.seeds,
                "optimum": optimum,
                "real_only_final": float(real_final),
                "real_only_compute": float(real_compute),
                "summary": summary,
                "targets": targets,
                "mean_curves": {arm: c.tolist() for arm, c in curves.items()},
            },
            indent=1,
        )
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, runs in results.items():
        n = min(len(r["curve"]) for r in runs)
        ys = np.array([np.asarray(r["curve"][:n])[:, 1] for r in runs])
        x = curves[arm][:, 0]
        ax.plot(x, ys.mean(0), label=arm)
        ax.fill_between(x, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), alpha=0.15)
    ax.axhline(real_final, color="grey", ls="--", lw=0.8, label="real-only final")
    ax.axvline(real_compute / 3, color="grey", ls=":", lw=0.8, label="C / 3")
    ax.set_xscale("symlog", linthresh=1000)
    ax.set_xlim(left=0)
    ax.set_xlabel("compute (real evaluations = 1, world-model evaluations = %g)" % cfg.wm_cost)
    ax.set_ylabel("true expected reward")
    ax.set_title(f"GRPO contextual bandit, bias={cfg.bias}, {args.seeds} seeds (mean ± std)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "reward_vs_compute.png", dpi=120)
    print("wrote", out_dir / "results.json", out_dir / "reward_vs_compute.png")


if __name__ == "__main__":
    main()
