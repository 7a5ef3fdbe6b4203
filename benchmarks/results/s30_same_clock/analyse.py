"""Round s30's outcome (PLAN.md): WMRL (40 updates) against simulator RL given 3x WMRL's RL seconds of the same session.

Reads seed<s>/results.json and seed<s>/heldout_eval.json (100 episodes, seeds 300000+); writes outcome.json.
Run from the repository root: python benchmarks/results/s30_same_clock/analyse.py
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
KEY = "seed300000_x100"


def stat(xs):
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    verdict = "win" if m > se else "loss" if m < -se else "tie"  # nan s.e. (one seed): "tie"
    return {"mean_points": 100 * m, "se_points": 100 * se, "n": len(xs), "above_0": sum(x > 1e-9 for x in xs),
            "ties": sum(abs(x) <= 1e-9 for x in xs), "verdict": verdict, "per_seed_points": [100 * x for x in xs]}


rows = []
for d in sorted(HERE.glob("seed*"), key=lambda p: int(p.name.removeprefix("seed"))):
    ev = json.loads((d / "heldout_eval.json").read_text()).get(KEY, {})
    if not {"wmrl_both", "sim"} <= ev.keys():  # not finished
        continue
    s = int(d.name.removeprefix("seed"))
    res = json.loads((d / "results.json").read_text())
    w, r = res["wmrl_both"], res["sim"]
    old = HERE.parent / "s27_updates40" / f"seed{s}"  # the same seed on session 23's world model, sessions 25/27
    old_w = json.loads((old / "results.json").read_text())["wmrl_both"] if old.exists() else None
    old_h = json.loads((old / "heldout_eval.json").read_text())[KEY]["wmrl_both"] if old.exists() else None
    rows.append({"seed": s, "base": ev["base"]["success_rate"], "wmrl": ev["wmrl_both"]["success_rate"],
                 "sim": ev["sim"]["success_rate"], "wmrl_rl_seconds": w["rl_seconds"], "wmrl_updates": w["updates"],
                 "wmrl_real_steps": w["real_env_steps"], "sim_rl_seconds": r["rl_seconds"],
                 "sim_updates": r["updates"], "sim_real_steps": r["real_env_steps"],
                 "time_fraction": w["rl_seconds"] / r["rl_seconds"],
                 "sim_real_steps_per_second": r["real_env_steps"] / r["rl_seconds"],
                 "wmrl_trainer_final": w["final_success_rate"], "sim_trainer_final": r["final_success_rate"],
                 "s27_wmrl_rl_seconds": old_w and old_w["rl_seconds"],
                 "s27_wmrl_heldout": old_h and old_h["success_rate"]})
out = {"rows": rows}
if rows:
    out["wmrl_minus_sim"] = stat([r["wmrl"] - r["sim"] for r in rows])
    out["wmrl_gain"] = stat([r["wmrl"] - r["base"] for r in rows])
    out["sim_gain"] = stat([r["sim"] - r["base"] for r in rows])
    print("seed base wmrl sim (wmrl-sim) | WMRL RL s (s27's), sim updates, RL s, real steps, WMRL's time fraction, "
          "sim real steps/s | WMRL held-out in s27")
    for r in rows:
        print(f"  {r['seed']} {r['base']:.2f} {r['wmrl']:.2f} {r['sim']:.2f} {100 * (r['wmrl'] - r['sim']):+4.0f} | "
              f"{r['wmrl_rl_seconds']:5.0f} ({r['s27_wmrl_rl_seconds'] or float('nan'):5.0f}) {r['sim_updates']:3d} "
              f"{r['sim_rl_seconds']:6.0f} {r['sim_real_steps']:6d} {r['time_fraction']:.3f} "
              f"{r['sim_real_steps_per_second']:.1f} | {r['s27_wmrl_heldout'] or float('nan'):.2f}")
    for k in ("wmrl_minus_sim", "wmrl_gain", "sim_gain"):
        v = out[k]
        print(f"  {k}: {v['mean_points']:+.1f} (s.e. {v['se_points']:.1f}), n={v['n']}, >0 on {v['above_0']}, "
              f"ties {v['ties']}: {v['verdict']}")
(HERE / "outcome.json").write_text(json.dumps(out, indent=1))
