"""Pool round s26 with round s25 (PLAN.md): paired held-out `wmrl_both - wm` over seeds 0-11.

Seeds 0-5 come from ../s25_gap_z (its `wmrl_both_gapz` arm is `wmrl_both` at today's default `gap_z=1`), seeds 6-11
from this directory. Reads each seed's heldout_eval.json (100 episodes, seeds 300000+); writes heldout_pooled.json.
Run from the repository root: python benchmarks/results/s26_more_seeds/pool.py
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
SOURCES = [(HERE.parent / "s25_gap_z" / f"seed{s}", s, "wmrl_both_gapz") for s in range(6)] + [
    (HERE / f"seed{s}", s, "wmrl_both") for s in range(6, 12)]


def mean_se(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd / math.sqrt(len(xs))


rows = []
for d, seed, both_arm in SOURCES:
    f = d / "heldout_eval.json"
    if not f.exists():
        continue
    ev = json.loads(f.read_text())["seed300000_x100"]
    rows.append({"seed": seed, "base": ev["base"]["success_rate"], "wm": ev["wm"]["success_rate"],
                 "wmrl_both": ev[both_arm]["success_rate"], "source": str(d)})

out = {"seeds": [r["seed"] for r in rows], "rows": rows}
print(f"{'seed':>4} {'base':>5} {'wm':>5} {'both':>5} {'both-wm':>8}")
for r in rows:
    print(f"{r['seed']:>4} {r['base']:>5.2f} {r['wm']:>5.2f} {r['wmrl_both']:>5.2f} {100 * (r['wmrl_both'] - r['wm']):>+8.0f}")
for key, xs in [("paired_both_minus_wm", [r["wmrl_both"] - r["wm"] for r in rows]),
                ("gain_both", [r["wmrl_both"] - r["base"] for r in rows]),
                ("gain_wm", [r["wm"] - r["base"] for r in rows])]:
    m, se = mean_se(xs)
    out[key] = {"mean_points": 100 * m, "se_points": 100 * se, "n": len(xs),
                "ahead": sum(x > 0 for x in xs), "ties": sum(x == 0 for x in xs)}
    print(f"{key}: {100 * m:+.1f} points (s.e. {100 * se:.1f}), n={len(xs)}, >0 on {out[key]['ahead']}, ties {out[key]['ties']}")
(HERE / "heldout_pooled.json").write_text(json.dumps(out, indent=1))
