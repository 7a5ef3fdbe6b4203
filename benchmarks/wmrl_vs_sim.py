"""WMRL against simulator RL (and the correction ablations) from the same behaviour-cloned base, seeds and machine.

Each arm is one `python -m vla_wmrl.train` run (same code path, chosen by config), started from the same SFT policy
and world-model checkpoint; the arms run one after another so each has the whole machine. Records real-simulator
success against RL wall-clock (evaluation time excluded, identical for every arm) and against real environment steps,
prints a table (time to reach simulator RL's final success, final success, real steps used) and writes JSON + PNG.

    python benchmarks/wmrl_vs_sim.py --arms sim sim_1group wmrl_both wm wmrl_none wmrl_debias wmrl_denoise \
        [--out benchmarks/results/wmrl_vs_sim] -- sim=robosuite_lift policy_path=... world_model_path=...

Everything after ``--`` is passed to the trainer as Hydra overrides (e.g. wmrl.updates=20).

``--budget-fraction F`` compares at equal time instead: ``sim`` runs first (its updates as configured), then every
other arm runs as many updates as fit in F x sim's RL wall-clock of this run (``wmrl.max_minutes``), so "reaches
simulator RL's final success in <= F of its time" is read off the arms' final evaluation, timed side by side on the
same machine. ``--budget-from ARM`` makes another arm the clock: e.g. ``--arms wmrl_both sim --budget-from wmrl_both
--budget-fraction 3`` runs WMRL for its configured updates, then gives simulator RL 3x the RL seconds WMRL took, on
this machine in this session (budgets copied from other sessions' runs carry their machines' speed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hydra import compose, initialize_config_dir

ARMS = {  # arm -> trainer overrides
    "sim": ["wmrl.mode=sim", "correction=none"],
    # Standard RL on WMRL's real-data budget: one real group per update, as many as WMRL's anchor groups (default
    # correction: 10% of 8 groups, at least 1). If this matches WMRL, the imagined groups add nothing. On Lift it
    # depends on the builds: level on the Zen 3 machine's 7000-step world model (round s38: 6 seeds, WMRL - sim_1group
    # -2.7 points held-out, s.e. 3.3, in 38% of WMRL's RL seconds), behind on the AVX-512 machine's 10000-step one
    # (round s40: 4 seeds, +12.8, s.e. 2.3, in 49%), so it is one of the default arms.
    "sim_1group": ["wmrl.mode=sim", "correction=none", "wmrl.groups=1"],
    "wm": ["wmrl.mode=wm", "correction=none"],
    "wmrl_none": ["wmrl.mode=wmrl", "correction=none"],
    "wmrl_debias": ["wmrl.mode=wmrl", "correction=debias"],
    "wmrl_denoise": ["wmrl.mode=wmrl", "correction=denoise"],
    "wmrl_both": ["wmrl.mode=wmrl", "correction=both"],
    # The warm-up before session 18's default (2 groups): 8 real groups cost one simulator-RL update (~140 s on Lift),
    # as much as 3 WMRL updates; with 2 the calibrator reaches its min_pairs (64) only at update 6. The results in
    # benchmarks/results/ before session 18 ran the wmrl arms with 8 (arm wmrl_both_warmup2 was today's wmrl_both).
    "wmrl_both_warmup8": ["wmrl.mode=wmrl", "correction=both", "wmrl.warmup_groups=8"],
    # Anchor groups imagined and replayed in the simulator: the calibrator learns from imagined rollouts' scores
    # (benchmarks/calibration_pairs.py); same real steps per update.
    "wmrl_both_replay": ["wmrl.mode=wmrl", "correction=both", "wmrl.anchor_mode=replay"],
    "wmrl_debias_replay": ["wmrl.mode=wmrl", "correction=debias", "wmrl.anchor_mode=replay"],
    # Closed-loop anchors; the calibrator learns from the imagination check's scores matched by rank to the anchor
    # groups' real outcomes (the right distribution, no replay, no extra real steps).
    "wmrl_both_matched": ["wmrl.mode=wmrl", "correction=both", "correction.calibration_pairs=matched"],
    "wmrl_debias_matched": ["wmrl.mode=wmrl", "correction=debias", "correction.calibration_pairs=matched"],
    # The world model fine-tuned every 5 updates on the new real episodes (success-balanced windows,
    # wm_finetune_success_frac), so it follows the changing policy (off in the toolkit's default).
    "wmrl_both_finetune": ["wmrl.mode=wmrl", "correction=both", "wmrl.wm_finetune_every=5"],
    # The imagination gap judged by its lower confidence bound (gap - 1 s.e.), so the outcome noise of one anchor
    # group does not turn the imagined stream down (docs/correction.md, "Noise-aware gap"). The default since
    # session 25: wmrl_both_gapz is wmrl_both now, and wmrl_both_gapz0 is wmrl_both of the rounds before it.
    "wmrl_both_gapz": ["wmrl.mode=wmrl", "correction=both", "correction.gap_z=1.0"],
    "wmrl_both_gapz0": ["wmrl.mode=wmrl", "correction=both", "correction.gap_z=0.0"],
    # The imagination check off.
    "wmrl_both_nogap": ["wmrl.mode=wmrl", "correction=both", "correction.gap_tolerance=null"],
}


def time_to_reach(history: list[dict], target: float, key: str = "train_seconds") -> float | None:
    """First RL wall-clock (or real steps) at which an evaluation reached ``target`` success; None if never."""
    for h in history:
        if h["success_rate"] >= target - 1e-9:
            return h[key]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=["sim", "sim_1group", "wmrl_both", "wm"], choices=list(ARMS))
    parser.add_argument("--out", default="benchmarks/results/wmrl_vs_sim")
    parser.add_argument("--report-only", action="store_true", help="only redraw the table and plot from results.json")
    parser.add_argument("--budget-fraction", type=float, default=None,
                        help="run the other arms for this multiple of the --budget-from arm's RL wall-clock")
    parser.add_argument("--budget-from", default="sim", choices=list(ARMS),
                        help="with --budget-fraction: the arm that runs first, at its configured updates, and sets "
                             "the others' budget (default: sim)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the trainer (after --)")
    args = parser.parse_args()
    overrides = args.overrides
    if not any(o.startswith("max_minutes=") for o in overrides):
        overrides = ["max_minutes=null", *overrides]  # arms are compared at their RL budgets, not the default run's
    if args.budget_fraction is not None:
        if not 0 < args.budget_fraction:
            parser.error(f"--budget-fraction must be > 0, got {args.budget_fraction}")
        clock = args.budget_from
        args.arms = sorted(args.arms, key=lambda a: a != clock)  # the clock first: the others' budget is its time
    from vla_wmrl.train import run

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    config_dir = str(Path(__file__).resolve().parent.parent / "configs")
    for arm in [] if args.report_only else args.arms:
        arm_overrides = list(overrides)
        if args.budget_fraction is not None and arm != clock:
            if clock not in results:
                parser.error(f"--budget-fraction needs the {clock} arm (--budget-from): add it to --arms (or run it "
                             "into --out first)")
            budget_min = args.budget_fraction * results[clock]["rl_seconds"] / 60
            arm_overrides = [o for o in overrides if not o.startswith(("wmrl.updates=", "wmrl.max_minutes="))]
            arm_overrides += [f"wmrl.max_minutes={budget_min:.4f}", "wmrl.updates=1000"]  # the budget decides
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            cfg = compose("train", overrides=[*arm_overrides, *ARMS[arm]])
        print(f"=== arm {arm}: {' '.join(ARMS[arm] + arm_overrides)}", flush=True)
        summary = run(cfg, out / "runs" / arm)
        results[arm] = {k: summary[k] for k in ("history", "base_success_rate", "final_success_rate",
                                                 "real_env_steps", "rl_seconds", "eval_episodes", "updates")}
        results[arm]["overrides"] = ARMS[arm] + arm_overrides
        results_path.write_text(json.dumps(results, indent=2))  # after every arm: a crash keeps finished arms

    target = results["sim"]["final_success_rate"] if "sim" in results else None
    sim_time = results["sim"]["rl_seconds"] if "sim" in results else None
    rows = []
    for arm, r in results.items():
        t = time_to_reach(r["history"], target) if target is not None else None
        rows.append({"arm": arm, "base": r["base_success_rate"], "final": r["final_success_rate"],
                     "rl_seconds": r["rl_seconds"], "real_steps": r["real_env_steps"],
                     "seconds_to_sim_final": t, "fraction_of_sim_time": t / sim_time if t is not None and sim_time
                     else None})
    print(f"\ntarget = simulator RL's final success: {target}")
    print("| arm | base success | final success | RL seconds | real env steps | seconds to sim's final | "
          "fraction of sim's time |\n|---|---|---|---|---|---|---|")
    for r in rows:
        t = "never" if r["seconds_to_sim_final"] is None else f"{r['seconds_to_sim_final']:.0f}"
        f = "-" if r["fraction_of_sim_time"] is None else f"{r['fraction_of_sim_time']:.2f}"
        print(f"| {r['arm']} | {r['base']:.2f} | {r['final']:.2f} | {r['rl_seconds']:.0f} | {r['real_steps']} | {t} | "
              f"{f} |")
    (out / "table.json").write_text(json.dumps({"target": target, "rows": rows}, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for arm, r in results.items():
        h = r["history"]
        axes[0].plot([x["train_seconds"] / 60 for x in h], [x["success_rate"] for x in h], "o-", label=arm)
        axes[1].plot([x["real_steps_total"] for x in h], [x["success_rate"] for x in h], "o-", label=arm)
    axes[0].set_xlabel("RL wall-clock (minutes, evaluation excluded)")
    axes[1].set_xlabel("real environment steps")
    axes[1].set_xscale("symlog", linthresh=1000)  # linear up to 1000 steps (an arm at 0 stays on the plot), log above
    most = max([x["real_steps_total"] for r in results.values() for x in r["history"]] + [1000])
    axes[1].set_xticks([0] + [10 ** k for k in range(3, len(str(int(most))))])  # not 10^2: it would sit on 0
    for ax in axes:
        ax.set_ylabel("real-simulator success rate")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "success_curves.png", dpi=120)
    print(f"wrote {results_path}, {out / 'table.json'}, {out / 'success_curves.png'}")


if __name__ == "__main__":
    main()
