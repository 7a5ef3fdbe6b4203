"""Round s28's outcomes (PLAN.md): WMRL at 20 and 40 updates against simulator RL given 3x their RL wall-clock.

WMRL held-out: ../s25_gap_z/seed<s> (20 updates, arm wmrl_both_gapz) and ../s27_updates40/seed<s> (40 updates);
simulator RL: seed<s>_3x20 and seed<s>_3x40 here (100 episodes, seeds 300000+). Writes outcome.json.
Run from the repository root: python benchmarks/results/s28_sim_3x/analyse.py
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
KEY = "seed300000_x100"
WMRL = {"3x20": ("s25_gap_z", "wmrl_both_gapz", 20), "3x40": ("s27_updates40", "wmrl_both", 40)}


def stat(xs):
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    verdict = "win" if m > se else "loss" if m < -se else "tie"  # nan s.e. (one seed): "tie"
    return {"mean_points": 100 * m, "se_points": 100 * se, "n": len(xs), "above_0": sum(x > 1e-9 for x in xs),
            "ties": sum(abs(x) <= 1e-9 for x in xs), "verdict": verdict, "per_seed_points": [100 * x for x in xs]}


out = {}
for phase, (wround, warm, wupdates) in WMRL.items():
    rows = []
    for d in sorted(HERE.glob(f"seed*_{phase}")):
        ev = json.loads((d / "heldout_eval.json").read_text())[KEY]
        if "sim" not in ev:  # not finished
            continue
        s = int(d.name.removeprefix("seed").split("_")[0])
        r = json.loads((d / "results.json").read_text())["sim"]
        wr = json.loads((HERE.parent / "s27_updates40" / f"seed{s}" / "results.json").read_text())["wmrl_both"]
        w_sec = next(h["train_seconds"] for h in wr["history"] if h["update"] == wupdates)
        wmrl = json.loads((HERE.parent / wround / f"seed{s}" / "heldout_eval.json").read_text())[KEY][warm]
        rows.append({"seed": s, "base": ev["base"]["success_rate"], "sim": ev["sim"]["success_rate"],
                     "wmrl": wmrl["success_rate"], "wmrl_updates": wupdates, "wmrl_rl_seconds": w_sec,
                     "sim_updates": r["updates"], "sim_rl_seconds": r["rl_seconds"],
                     "time_fraction": w_sec / r["rl_seconds"], "sim_real_steps": r["real_env_steps"],
                     "sim_trainer_final": r["final_success_rate"],
                     # descriptive, added in session 29: the simulator's pace on each session's machine
                     "sim_real_steps_per_second": r["real_env_steps"] / r["rl_seconds"]})
    if not rows:
        continue
    out[phase] = {"rows": rows, "wmrl_minus_sim": stat([r["wmrl"] - r["sim"] for r in rows]),
                  "sim_gain": stat([r["sim"] - r["base"] for r in rows]),
                  "wmrl_gain": stat([r["wmrl"] - r["base"] for r in rows])}
    print(f"\nWMRL {wupdates} updates vs simulator RL at {phase}: seed base wmrl sim (wmrl-sim) | sim updates, "
          "RL s, real steps, WMRL's time fraction, trainer final, real steps/s")
    for r in rows:
        print(f"  {r['seed']} {r['base']:.2f} {r['wmrl']:.2f} {r['sim']:.2f} {100 * (r['wmrl'] - r['sim']):+4.0f} | "
              f"{r['sim_updates']:3d} {r['sim_rl_seconds']:6.0f} {r['sim_real_steps']:6d} "
              f"{r['time_fraction']:.3f} {r['sim_trainer_final']:.2f} {r['sim_real_steps_per_second']:.1f}")
    for k in ("wmrl_minus_sim", "sim_gain", "wmrl_gain"):
        v = out[phase][k]
        print(f"  {k}: {v['mean_points']:+.1f} (s.e. {v['se_points']:.1f}), n={v['n']}, >0 on {v['above_0']}, "
              f"ties {v['ties']}: {v['verdict']}")
if "3x20" in out and "3x40" in out:  # simulator RL's own gain from the longer budget
    at20 = {r["seed"]: r for r in out["3x20"]["rows"]}
    out["sim_3x40_minus_3x20"] = stat([r["sim"] - at20[r["seed"]]["sim"] for r in out["3x40"]["rows"]
                                       if r["seed"] in at20])
    v = out["sim_3x40_minus_3x20"]
    print(f"\nsimulator RL, 3x40 - 3x20: {v['mean_points']:+.1f} (s.e. {v['se_points']:.1f}), n={v['n']}")
    # descriptive, added after seed 0 (not in the plan): the earliest WMRL policy (20 or 40 updates) whose held-out
    # success reaches simulator RL's 3x40 final, and the fraction of simulator RL's RL seconds it had used
    out["reaches_sim_final"] = []
    for r in out["3x40"]["rows"]:
        r20 = at20.get(r["seed"])
        hit = r20 if r20 and r20["wmrl"] >= r["sim"] else r if r["wmrl"] >= r["sim"] else None
        out["reaches_sim_final"].append({"seed": r["seed"], "sim_final": r["sim"],
                                         "wmrl_updates": hit and hit["wmrl_updates"],
                                         "time_fraction": hit and hit["wmrl_rl_seconds"] / r["sim_rl_seconds"]})
        print(f"  seed {r['seed']}: WMRL reaches simulator RL's final {r['sim']:.2f} "
              + (f"at {hit['wmrl_updates']} updates, {hit['wmrl_rl_seconds'] / r['sim_rl_seconds']:.2f} of its time"
                 if hit else "at neither 20 nor 40 updates"))
(HERE / "outcome.json").write_text(json.dumps(out, indent=1))
