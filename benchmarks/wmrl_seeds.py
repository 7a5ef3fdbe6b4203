"""Aggregate `benchmarks/wmrl_vs_sim.py` runs over seeds: one results directory per seed, same arms and settings.

    python benchmarks/wmrl_seeds.py benchmarks/results/wmrl_check_seed0 benchmarks/results/wmrl_check_seed1 ... \
        [--arms wmrl_both wmrl_none] [--out benchmarks/results/wmrl_check_seeds.json]

Prints, per arm, each seed's success at every evaluation and the mean and standard deviation over seeds of the gain
(final - base), of the final success and of the RL wall-clock, and writes them as JSON. An arm missing from a seed's
directory is reported over the seeds that have it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def aggregate(dirs: list[Path], arms: list[str] | None = None) -> dict:
    per_arm: dict[str, list[dict]] = {}
    for d in dirs:
        path = d / "results.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: pass directories written by benchmarks/wmrl_vs_sim.py")
        for arm, r in json.loads(path.read_text()).items():
            if arms and arm not in arms:
                continue
            per_arm.setdefault(arm, []).append({"dir": str(d), "curve": [h["success_rate"] for h in r["history"]],
                                                "base": r["base_success_rate"], "final": r["final_success_rate"],
                                                "rl_seconds": r["rl_seconds"], "real_steps": r["real_env_steps"]})
    out = {}
    for arm, runs in per_arm.items():
        gain = np.array([r["final"] - r["base"] for r in runs])
        final = np.array([r["final"] for r in runs])
        secs = np.array([r["rl_seconds"] for r in runs])
        sd = (lambda x: float(x.std(ddof=1)) if x.size > 1 else float("nan"))
        out[arm] = {"seeds": len(runs), "runs": runs, "gain_mean": float(gain.mean()), "gain_sd": sd(gain),
                    "final_mean": float(final.mean()), "final_sd": sd(final), "rl_seconds_mean": float(secs.mean()),
                    "real_steps_mean": float(np.mean([r["real_steps"] for r in runs]))}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="one wmrl_vs_sim.py output directory per seed")
    parser.add_argument("--arms", nargs="+", default=None, help="only these arms (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write (default: print only)")
    args = parser.parse_args()
    table = aggregate(args.dirs, args.arms)
    print("| arm | seeds | success per seed (base -> ... -> final) | gain mean +- sd (points) | final mean +- sd | "
          "RL s | real steps |\n|---|---|---|---|---|---|---|")
    for arm, a in table.items():
        curves = "; ".join(" -> ".join(f"{x:.2f}" for x in r["curve"]) for r in a["runs"])
        print(f"| {arm} | {a['seeds']} | {curves} | {100 * a['gain_mean']:+.1f} +- {100 * a['gain_sd']:.1f} | "
              f"{a['final_mean']:.3f} +- {a['final_sd']:.3f} | {a['rl_seconds_mean']:.0f} | "
              f"{a['real_steps_mean']:.0f} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(table, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
