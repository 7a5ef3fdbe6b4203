"""Round analysis (PLAN.md): paired "both" minus raw_wm, debias and denoise over all seeds, and the step-0 check
that seeds 0-9 repeat session 19's run. Run from the repository root after the benchmark:
python benchmarks/results/correction_bandit_frozen_40seeds/analyse.py   (writes paired.json beside it)
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
KEY = "main_finetune_rate_0"
POINTS = ["C/3", "C/2", "C/30", "area"]  # the first two are the primary comparison points
new = json.loads((HERE / "results.json").read_text())["settings"][KEY]["summary"]
old = json.loads((HERE.parent / "correction_bandit_frozen" / "results.json").read_text())["settings"][KEY]["summary"]

step0 = {}
for arm in old:
    for p in POINTS + ["C/10"]:
        k = f"reward_at_{p}_per_seed"
        if k in old[arm]:
            a, b = old[arm][k], new[arm][k][: len(old[arm][k])]
            step0[f"{arm} {p}"] = max(abs(x - y) for x, y in zip(a, b))
worst = max(step0.values())
print(f"step 0: largest |difference| on seeds 0-9 against session 19's run: {worst:.2e}")

out = {"step0_max_abs_diff_seeds_0_9": worst, "paired": {}}
print(f"{'both minus':<10} " + " ".join(f"{p:>26}" for p in POINTS))
all_primary = True
for other in ["raw_wm", "debias", "denoise"]:
    cells = []
    for p in POINTS:
        k = f"reward_at_{p}_per_seed"
        d = [x - y for x, y in zip(new["both"][k], new[other][k])]
        n = len(d)
        m = sum(d) / n
        se = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1) / n)
        ahead = sum(x > 0 for x in d)
        z = m / se if se > 0 else float("inf")
        out["paired"][f"{other} {p}"] = {"mean": m, "se": se, "z": z, "seeds_ahead": ahead, "n": n}
        if p in ("C/3", "C/2"):
            all_primary &= m > 0 and z > 2
        cells.append(f"{m:+.4f} ± {se:.4f} ({ahead}/{n})")
    print(f"{other:<10} " + " ".join(f"{c:>26}" for c in cells))
out["primary_met_all_six_over_2se"] = all_primary
print(f"primary (all six differences at C/3 and C/2 > 0 and > 2 s.e.): {'met' if all_primary else 'not met'}")
(HERE / "paired.json").write_text(json.dumps(out, indent=1))
