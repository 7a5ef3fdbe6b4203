"""World-model training speed: bf16 autocast against fp32, side by side.

The world-model stage is the longest of the default run (10000 steps of the conv U-Net, 15-29 min on 2 cores).
``TrainWorldModelConfig.precision=bf16`` (``pipeline.wm_precision`` in the trainer) runs the training forward pass
under bfloat16 autocast; weights, optimiser and validation stay fp32.

Training steps of the Lift-sized default conv world model (64x64 camera, 9-D state, 7-D action,
``configs/world_model/conv.yaml``, the pipeline's batch of 32), fp32 and bf16 alternating so that machine noise hits
both alike. Speed does not depend on the data, so random windows are used. What the model learns at each precision
is measured on real data with the toolkit's own commands (``docs/world_models.md``, "Training precision"): train with
``python -m vla_wmrl.train_world_model ... precision=bf16`` as the pipeline's stage does, then score both checkpoints
on the same held-out episodes with ``python -m vla_wmrl.eval_world_model``.

    python benchmarks/wm_train_speed.py [--threads 2] [--repeats 5]

Prints a table and writes ``benchmarks/results/wm_train_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np
import torch
from omegaconf import OmegaConf

import world_models
from vla_wmrl import train_world_model as twm
from vla_wmrl.train import torch_threads
from world_models.base import ACTIONS, FRAME_MASK, FRAMES, REWARD, STATES, STEP_MASK, SUCCESS

ROOT = Path(__file__).resolve().parents[1]
IMG = "observation.images.agentview"


def model_config() -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs/world_model/conv.yaml"))
    return {**cfg, "image_keys": [IMG], "image_size": 64, "state_dim": 9, "action_dim": 7}


def random_batch(cfg: dict, batch_size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    B, T, K = batch_size, cfg["context"], cfg["rollout_steps"]
    return {FRAMES: torch.rand(B, T + K, 3, 64, 64, generator=g), STATES: torch.randn(B, T + K, 9, generator=g),
            ACTIONS: torch.rand(B, K, 7, generator=g) * 2 - 1, REWARD: torch.rand(B, K, generator=g),
            SUCCESS: (torch.rand(B, K, generator=g) > 0.9).float(), STEP_MASK: torch.ones(B, K),
            FRAME_MASK: torch.ones(B, K)}


def time_steps(model, opt, batch: dict, precision: str, steps: int) -> float:
    """Seconds per training step (forward under ``precision``, backward, AdamW) over ``steps`` steps."""
    amp = twm.autocast("cpu", precision)
    t0 = time.perf_counter()
    for _ in range(steps):
        with amp:
            loss, _ = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def speed(args) -> dict:
    cfg = model_config()
    batch = random_batch(cfg, args.batch_size)
    runs = {}
    for p in twm.PRECISIONS:
        torch.manual_seed(0)
        model = world_models.make_world_model("conv", dict(cfg))
        model.train()
        runs[p] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    per_step = {p: [] for p in twm.PRECISIONS}
    with torch_threads(args.threads):
        for p in twm.PRECISIONS:  # warm-up (allocator, oneDNN kernel selection)
            time_steps(*runs[p], batch, p, 3)
        for r in range(args.repeats):
            for p in (twm.PRECISIONS if r % 2 == 0 else twm.PRECISIONS[::-1]):
                per_step[p].append(time_steps(*runs[p], batch, p, args.steps_per_repeat))
                print(f"repeat {r}: {p} {per_step[p][-1] * 1000:.0f} ms/step", flush=True)
    median = {p: float(np.median(v)) for p, v in per_step.items()}
    return {"seconds_per_step": per_step, "median_seconds_per_step": median,
            "steps_per_second": {p: 1 / m for p, m in median.items()},
            "time_ratio_bf16_to_fp32": median["bf16"] / median["fp32"],
            "paired_ratios": [b / f for f, b in zip(per_step["fp32"], per_step["bf16"])]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="windows per step (pipeline.wm_batch_size)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps-per-repeat", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/wm_train_speed.json"))
    args = parser.parse_args()

    result = {"cpu_count": os.cpu_count(), "threads": args.threads, "batch_size": args.batch_size,
              "speed": speed(args)}
    s = result["speed"]
    print(f"\nconv world model, batch {args.batch_size}, {args.threads} threads, median of {args.repeats} x "
          f"{args.steps_per_repeat} steps")
    print(f"{'precision':>9} | {'ms/step':>7} | {'steps/s':>7} | ratio to fp32")
    for p in twm.PRECISIONS:
        m = s["median_seconds_per_step"][p]
        print(f"{p:>9} | {m * 1000:7.0f} | {1 / m:7.2f} | {m / s['median_seconds_per_step']['fp32']:.2f}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
