"""Imagined-environment steps per second against the real simulator's, at the same image size, in one run.

Usage::

    python benchmarks/imagination_throughput.py                                   # an untrained default conv model
    python benchmarks/imagination_throughput.py --checkpoint outputs/train_world_model/robosuite_lift_conv/checkpoints/last

The real rate is one single-process simulator stepping random actions (episodes reset at their horizon; the reset
time counts). The imagined rate is ``batch x steps / seconds`` of :class:`world_models.ImaginedVectorEnv` with random
actions, numpy observations included, so both sides return the same thing. Speed does not depend on the weights,
so an untrained model measures the same as a trained one of the same config.

Prints a table and writes ``benchmarks/results/imagination_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np
import torch

import sims
import world_models


def sim_rate(sim: str, image_size: int, steps: int, seed: int = 0) -> tuple[float, dict]:
    """Steps per second of one simulator process with random actions; also returns a start observation."""
    env = sims.make_env(sim, image_size=image_size)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    start = obs
    for _ in range(5):  # warm up the renderer
        env.step(env.action_space.sample())
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        if terminated or truncated:
            env.reset(seed=int(rng.integers(1 << 30)))
    rate = steps / (time.perf_counter() - t0)
    env.close()
    return rate, start


def imagined_rate(model, start: dict, batch: int, steps: int, horizon: int) -> float:
    """Env steps per second (batch x steps / seconds) of the imagined env at one batch size."""
    obs = {k: np.repeat(np.asarray(v)[None], batch, axis=0) for k, v in start.items() if k != "task"}
    obs["task"] = (start["task"],) * batch
    env = world_models.ImaginedVectorEnv(model, horizon=horizon)
    env.reset(obs, seed=0)
    actions = torch.rand(steps + 2, batch, model.cfg.action_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1
    env.step(actions[0])  # warm up
    env.step(actions[1])
    t0 = time.perf_counter()
    for k in range(steps):
        env.step(actions[k + 2])
    return batch * steps / (time.perf_counter() - t0)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim", default="robosuite_lift")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--checkpoint", default=None, help="world-model checkpoint dir (default: untrained conv)")
    parser.add_argument("--model", default="conv", help="registered model when no checkpoint is given")
    parser.add_argument("--model-config", default="{}", help="JSON overrides of the model config (no checkpoint)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--sim-steps", type=int, default=300)
    parser.add_argument("--frames", type=int, default=2048, help="imagined env-steps per batch size (at least 3 "
                        "batched steps)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "imagination_throughput.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    real, start = sim_rate(args.sim, args.image_size, args.sim_steps)
    if args.checkpoint:
        model = world_models.load_world_model(args.checkpoint)
    else:
        keys = [k for k in start if k.startswith("observation.images.")]
        model = world_models.make_world_model(args.model, {
            **json.loads(args.model_config), "image_keys": keys, "image_size": args.image_size, "state_dim": start["observation.state"].shape[0],
            "action_dim": 7 if args.sim.startswith("robosuite") else sims.make_env(args.sim).action_space.shape[0]})
    model.eval()
    horizon = sims.SIMS[args.sim][2].get("horizon", 100)
    rows = []
    for b in args.batches:
        rate = imagined_rate(model, start, b, max(3, args.frames // b), horizon)
        rows.append({"batch": b, "imagined_steps_per_s": rate, "real_steps_per_s": real, "ratio": rate / real})

    print(f"\n{args.sim} {args.image_size}x{args.image_size}, world model {model.cfg.name} "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params), {args.threads} threads")
    print(f"{'batch':>6} {'imagined steps/s':>17} {'real steps/s':>13} {'ratio':>7}")
    for r in rows:
        print(f"{r['batch']:>6} {r['imagined_steps_per_s']:>17.1f} {r['real_steps_per_s']:>13.1f} {r['ratio']:>7.1f}")
    result = {"sim": args.sim, "image_size": args.image_size, "world_model": model.cfg.name,
              "checkpoint": args.checkpoint, "threads": args.threads, "real_steps_per_s": real,
              "load_average": os.getloadavg(), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"-> {out}")
    return result


if __name__ == "__main__":
    main()
