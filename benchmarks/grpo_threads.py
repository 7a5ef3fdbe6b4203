"""GRPO update time with more torch CPU threads against one thread, run side by side.

During a WMRL (or simulator-RL) update the simulator workers wait for the policy, so the GRPO update could use every
core while the rollouts need only one (``wmrl.threads``). This measures what ``wmrl.update_threads`` buys: one GRPO
update of the Lift-sized default TinyVLA (64x64 camera, 9-D state, 7-D action) on ``--rollouts`` x ``--steps`` steps,
at 1 thread and at ``--threads`` threads, alternating so that machine noise hits both alike. Speed does not depend on
the weights, so a freshly initialised policy and random observations are used (no dataset or checkpoint needed).

    python benchmarks/grpo_threads.py [--threads 2] [--repeats 3]

Prints a table and writes ``benchmarks/results/grpo_threads.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from omegaconf import OmegaConf

from vla_wmrl.algos.grpo import GRPO, GRPOConfig
from vla_wmrl.imagination import to_policy_batch
from vla_wmrl.policies import make_policy, make_policy_config
from vla_wmrl.train import torch_threads

ROOT = Path(__file__).resolve().parents[1]
IMG = "observation.images.agentview"


def make_batch(rollouts: int, steps: int, image: int, state: int, action: int, seed: int = 0) -> tuple[dict, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    n = rollouts * steps
    batch = {IMG: torch.randint(0, 256, (n, image, image, 3), dtype=torch.uint8, generator=g),
             "observation.state": torch.randn(n, state, generator=g),
             "action": torch.rand(n, action, generator=g) * 1.8 - 0.9,
             "task": ["lift the red cube"] * n}
    return batch, np.repeat(np.arange(rollouts), steps)


def time_update(policy, cfg: GRPOConfig, batch: dict, index: np.ndarray, rollouts: int, threads: int) -> float:
    """Seconds of one GRPO update (old log-probs included) with ``threads`` torch threads, on a copy of the policy."""
    algo = GRPO(copy.deepcopy(policy), None, cfg)
    adv = np.random.default_rng(0).standard_normal(rollouts)
    with torch_threads(threads):
        t0 = time.perf_counter()
        algo.update(batch, adv, np.ones(rollouts), index, rollouts, prepare=to_policy_batch)
        return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="threads of the compared run (baseline: 1)")
    parser.add_argument("--rollouts", type=int, default=64, help="rollouts per update (8 groups x 8)")
    parser.add_argument("--steps", type=int, default=60, help="steps per rollout (wmrl.horizon)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/grpo_threads.json"))
    args = parser.parse_args()

    policy_cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs/policy/tiny_vla.yaml"))
    policy_cfg.pop("name")
    inputs = {IMG: PolicyFeature(FeatureType.VISUAL, (3, 64, 64)),
              "observation.state": PolicyFeature(FeatureType.STATE, (9,))}
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (7,))}
    policy = make_policy(make_policy_config("tiny_vla", device="cpu", input_features=inputs, output_features=outputs,
                                            **policy_cfg))
    algo_cfg = GRPOConfig(**{k: v for k, v in OmegaConf.to_container(OmegaConf.load(ROOT / "configs/algo/grpo.yaml"))
                             .items() if k in GRPOConfig.__dataclass_fields__})
    batch, index = make_batch(args.rollouts, args.steps, 64, 9, 7)
    time_update(policy, algo_cfg, batch, index, args.rollouts, 1)  # warm-up (allocator, first-call overheads)

    times = {1: [], args.threads: []}
    for r in range(args.repeats):
        for threads in ([1, args.threads] if r % 2 == 0 else [args.threads, 1]):  # alternate the order
            times[threads].append(time_update(policy, algo_cfg, batch, index, args.rollouts, threads))
            print(f"repeat {r}: {threads} thread(s) {times[threads][-1]:.1f} s", flush=True)

    base, cand = np.median(times[1]), np.median(times[args.threads])
    n_steps = args.rollouts * args.steps
    print(f"\nGRPO update, {args.rollouts} rollouts x {args.steps} steps, {algo_cfg.epochs} epochs, "
          f"minibatch {algo_cfg.minibatch_size}, median of {args.repeats}")
    print(f"{'threads':>8} | {'seconds':>8} | {'steps/s':>8} | ratio to 1 thread")
    for threads, t in [(1, base), (args.threads, cand)]:
        print(f"{threads:>8} | {t:8.1f} | {n_steps * algo_cfg.epochs / t:8.0f} | {t / base:.2f}")
    out = {"rollouts": args.rollouts, "steps": args.steps, "epochs": algo_cfg.epochs,
           "minibatch_size": algo_cfg.minibatch_size, "cpu_count": os.cpu_count(),
           "seconds": {str(k): v for k, v in times.items()},
           "median_seconds": {"1": base, str(args.threads): cand}, "time_ratio": cand / base}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
