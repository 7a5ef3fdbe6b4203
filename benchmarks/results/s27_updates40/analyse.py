"""Round s27's outcomes (PLAN.md): held-out success at 40 updates against the same runs at 20 updates.

20-update results: ../s26_more_seeds/heldout_pooled.json's sources (s25 seeds 0-5, s26 seeds 6-11); 40-update
results: seed<s>/heldout_eval.json here (100 episodes, seeds 300000+). Also reads each resumed run's summary for RL
seconds, real steps and the trainer's 20-episode curve. Writes outcome.json.
Run from the repository root: python benchmarks/results/s27_updates40/analyse.py
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
ROUND20 = {s: (HERE.parent / "s25_gap_z" / f"seed{s}", {"wmrl_both": "wmrl_both_gapz", "wm": "wm"}) for s in range(6)}
ROUND20.update({s: (HERE.parent / "s26_more_seeds" / f"seed{s}", {"wmrl_both": "wmrl_both", "wm": "wm"})
                for s in range(6, 12)})
KEY = "seed300000_x100"


def mean_se(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd / math.sqrt(len(xs))


def stat(xs):
    m, se = mean_se(xs)
    return {"mean_points": 100 * m, "se_points": 100 * se, "n": len(xs), "above_0": sum(x > 1e-9 for x in xs),
            "ties": sum(abs(x) <= 1e-9 for x in xs)}


rows = {}
for s, (d20, names) in ROUND20.items():
    f40 = HERE / f"seed{s}" / "heldout_eval.json"
    if not f40.exists():
        continue
    ev20, ev40 = json.loads((d20 / "heldout_eval.json").read_text())[KEY], json.loads(f40.read_text())[KEY]
    for arm, name20 in names.items():
        if arm not in ev40:  # not run yet (the driver writes the base's result first)
            continue
        r = json.loads((HERE / f"seed{s}" / "results.json").read_text())[arm]
        at20 = next(h for h in r["history"] if h["update"] == 20)
        rows.setdefault(arm, []).append({
            "seed": s, "base": ev40["base"]["success_rate"], "at20": ev20[name20]["success_rate"],
            "at40": ev40[arm]["success_rate"], "updates": r["updates"],
            "rl_seconds_21_40": r["rl_seconds"] - at20["train_seconds"],
            "real_steps_21_40": r["real_env_steps"] - at20["real_steps_total"],
            "trainer_curve": {h["update"]: h["success_rate"] for h in r["history"]}})

out = {"rows": rows}
for arm, rs in rows.items():
    print(f"\n{arm}: seed base @20 @40 (40-20)  RL s 21-40, real steps 21-40, trainer 0/20/40")
    for r in rs:
        c = r["trainer_curve"]
        print(f"  {r['seed']:>2} {r['base']:.2f} {r['at20']:.2f} {r['at40']:.2f} {100 * (r['at40'] - r['at20']):+4.0f}"
              f"  {r['rl_seconds_21_40']:5.0f} {r['real_steps_21_40']:6d}  "
              f"{c.get(0, float('nan')):.2f}/{c.get(20, float('nan')):.2f}/{c.get(40, float('nan')):.2f}")
    out[arm] = {"gain_at40": stat([r["at40"] - r["base"] for r in rs]),
                "gain_at20": stat([r["at20"] - r["base"] for r in rs]),
                "paired_40_minus_20": stat([r["at40"] - r["at20"] for r in rs]),
                "rl_seconds_21_40_mean": sum(r["rl_seconds_21_40"] for r in rs) / len(rs)}
    for k in ("gain_at40", "gain_at20", "paired_40_minus_20"):
        v = out[arm][k]
        print(f"  {k}: {v['mean_points']:+.1f} (s.e. {v['se_points']:.1f}), n={v['n']}, >0 on {v['above_0']}, "
              f"ties {v['ties']}")

if "wm" in rows and "wmrl_both" in rows:  # secondary: both - wm at 40 updates, seeds with both
    wm = {r["seed"]: r for r in rows["wm"]}
    both = [r for r in rows["wmrl_both"] if r["seed"] in wm]
    out["paired_both_minus_wm_at40"] = stat([r["at40"] - wm[r["seed"]]["at40"] for r in both])
    out["paired_both_minus_wm_at20_same_seeds"] = stat([r["at20"] - wm[r["seed"]]["at20"] for r in both])
    for k in ("paired_both_minus_wm_at40", "paired_both_minus_wm_at20_same_seeds"):
        v = out[k]
        print(f"{k}: {v['mean_points']:+.1f} (s.e. {v['se_points']:.1f}), n={v['n']}, >0 on {v['above_0']}, "
              f"ties {v['ties']}")
(HERE / "outcome.json").write_text(json.dumps(out, indent=1))
