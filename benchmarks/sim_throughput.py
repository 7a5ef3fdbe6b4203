"""Simulator throughput: steps per second of each environment without cameras, with one camera at 64 and 128 px, and
with a 64 px camera whose rendering is switched off (``set_cameras_enabled(False)``, as the trainer's check replays
run), in one process and vectorised over 2 processes (gymnasium AsyncVectorEnv). Random actions; an episode that ends
is reset. Prints a table and writes JSON.

    python benchmarks/sim_throughput.py [--steps 200] [--sims mujoco_reach robosuite_lift] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

import sims

SETTINGS = [("no camera", []), ("64 px", 64), ("64 px, off", "off"), ("128 px", 128)]


def _kwargs(sim: str, setting) -> dict:
    if setting == []:
        return {"cameras": ()}
    camera = "top" if sim == "mujoco_reach" else "agentview"
    return {"cameras": (camera,), "image_size": 64 if setting == "off" else setting}


def single_process(sim: str, kwargs: dict, steps: int, render: bool = True) -> float:
    env = sims.make_env(sim, **kwargs)
    env.set_cameras_enabled(render)
    env.reset(seed=0)
    env.step(env.action_space.sample())  # warm-up (first render allocates buffers)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - t0)
    env.close()
    return rate


def vectorised(sim: str, kwargs: dict, steps: int, num_envs: int = 2, render: bool = True) -> float:
    envs = sims.make_vector_env(sim, num_envs, **kwargs)
    envs.call("set_cameras_enabled", render)
    envs.reset(seed=list(range(num_envs)))
    envs.step(envs.action_space.sample())
    t0 = time.perf_counter()
    for _ in range(steps // num_envs):
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        done = np.logical_or(terminated, truncated)
        if done.any():
            envs.reset(options={"reset_mask": done})
    rate = (steps // num_envs) * num_envs / (time.perf_counter() - t0)
    envs.close()
    return rate


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="steps per measurement")
    parser.add_argument("--sims", nargs="+", default=list(sims.SIMS), help="registered sim names")
    parser.add_argument("--out", default="benchmarks/results/sim_throughput.json")
    args = parser.parse_args()
    rows = []
    for sim in args.sims:
        for label, setting in SETTINGS:
            kwargs = _kwargs(sim, setting)
            one = single_process(sim, kwargs, args.steps, render=setting != "off")
            two = vectorised(sim, kwargs, args.steps, render=setting != "off")
            rows.append({"sim": sim, "observation": label, "steps_per_s_1proc": one, "steps_per_s_2proc": two,
                         "vector_speedup": two / one})
            print(f"{sim:16s} {label:10s} 1 proc {one:8.1f}/s   2 procs {two:8.1f}/s   x{two / one:4.2f}", flush=True)
    print("\n| sim | observation | steps/s, 1 process | steps/s, 2 processes | speed-up |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['sim']} | {r['observation']} | {r['steps_per_s_1proc']:.1f} | {r['steps_per_s_2proc']:.1f} | "
              f"{r['vector_speedup']:.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
                               "steps": args.steps, "results": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
