"""GRPO update time, two configurations side by side: the one the trainer uses against a baseline.

``--compare threads``: more torch CPU threads against one. During a WMRL (or simulator-RL) update the simulator
workers wait for the policy, so the update can use every core while the rollouts need only one (``wmrl.threads``);
this measures what ``wmrl.update_threads`` buys (no reference policy, as first measured).

``--compare log_prob``: the ratio's denominator recorded while sampling (``wmrl.rollout_log_prob=true``, given to the
update as ``old_log_prob``) against recomputing it before the update (one more forward pass over every step). Both
with the behaviour-cloned reference's KL penalty and ``--threads`` threads, as the trainer runs.

``--compare channels_last``: the policy's weights and images in channels-last memory order (NHWC, which oneDNN's CPU
convolutions prefer) against the default contiguous NCHW. The same arithmetic, another memory layout; with the
reference's KL penalty, recorded log-probabilities and ``--threads`` threads, as the trainer runs.

``--compare freeze_encoder``: the whole policy trained (the default) against ``algo.freeze_encoder=true``: the encoder
(CNN with FiLM, instruction GRU) held fixed, the steps encoded once per update and the epochs run on the action head
alone. With the reference's KL penalty, recorded log-probabilities and ``--threads`` threads, as the trainer runs. Not
the same update (the encoder does not learn): whether RL gains as much with it is a question for the trainer's rounds.

``--compare freeze_backbone``: the whole policy trained against ``algo.freeze_encoder=backbone``: the conv blocks (with
FiLM) and the GRU held fixed and their feature maps cached once per update; the image projection learns with the head.

``--compare bf16``: the update's forward passes under bfloat16 autocast (``algo.precision=bf16``) against float32,
each as the trainer runs it: with the reference's KL penalty and ``--threads`` threads, float32 from the recorded
log-probabilities, bf16 recomputing them first (``wmrl.rollout_log_prob=null``); also prints how far bf16
log-probabilities are from float32 ones on the same steps (random weights and images: a trained policy differs more).

One GRPO update of the Lift-sized default TinyVLA (64x64 camera, 9-D state, 7-D action) on ``--rollouts`` x
``--steps`` steps, the two configurations alternating so that machine noise hits both alike. Speed does not depend on
the weights, so a freshly initialised policy and random observations are used (no dataset or checkpoint needed).

    python benchmarks/grpo_update.py --compare threads|log_prob|channels_last|freeze_encoder|freeze_backbone|bf16 \
        [--threads 2] [--repeats 3]

Prints a table and writes ``benchmarks/results/grpo_<compare>.json``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
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


def channels_last_batch(batch: dict) -> dict:
    """``to_policy_batch`` with the (B, C, H, W) images in channels-last memory order."""
    out = to_policy_batch(batch)
    return {k: v.contiguous(memory_format=torch.channels_last) if isinstance(v, torch.Tensor) and v.dim() == 4 else v
            for k, v in out.items()}


def time_update(policy, cfg: GRPOConfig, batch: dict, index: np.ndarray, rollouts: int, threads: int,
                use_ref: bool = False, prepare=to_policy_batch) -> float:
    """Seconds of one GRPO update (with the log-probabilities it must compute: the old ones unless ``batch`` holds
    ``old_log_prob``, the reference's if ``use_ref``) with ``threads`` torch threads, on a copy of the policy."""
    algo = GRPO(copy.deepcopy(policy), copy.deepcopy(policy) if use_ref else None, cfg)
    adv = np.random.default_rng(0).standard_normal(rollouts)
    with torch_threads(threads):
        t0 = time.perf_counter()
        algo.update(batch, adv, np.ones(rollouts), index, rollouts, prepare=prepare)
        return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", choices=["threads", "log_prob", "channels_last", "freeze_encoder",
                                                    "freeze_backbone", "bf16"], default="log_prob")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (threads: of the compared run; the "
                                                               "baseline has 1)")
    parser.add_argument("--rollouts", type=int, default=64, help="rollouts per update (8 groups x 8)")
    parser.add_argument("--steps", type=int, default=60, help="steps per rollout (wmrl.horizon)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/grpo_<compare>.json)")
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
    if args.compare == "threads":
        names = ("1 thread", f"{args.threads} threads")
        runs = {names[0]: lambda: time_update(policy, algo_cfg, batch, index, args.rollouts, 1),
                names[1]: lambda: time_update(policy, algo_cfg, batch, index, args.rollouts, args.threads)}
    else:  # log_prob, channels_last: with the reference's KL penalty, as the trainer runs
        with torch_threads(args.threads):
            recorded = dict(batch, old_log_prob=GRPO(policy, None, algo_cfg).log_prob(batch, to_policy_batch))
    if args.compare == "channels_last":
        nhwc = copy.deepcopy(policy).to(memory_format=torch.channels_last)
        with torch.no_grad(), torch_threads(args.threads):  # the same function: log-probabilities agree
            head = {k: v[:512] for k, v in batch.items()}
            diff = (GRPO(nhwc, None, algo_cfg).log_prob(head, channels_last_batch)
                    - GRPO(policy, None, algo_cfg).log_prob(head, to_policy_batch)).abs().max().item()
        print(f"max |log-prob difference| channels_last - NCHW on 512 steps: {diff:.2e}")
        names = ("NCHW", "channels_last")
        runs = {names[0]: lambda: time_update(policy, algo_cfg, recorded, index, args.rollouts, args.threads, True),
                names[1]: lambda: time_update(nhwc, algo_cfg, recorded, index, args.rollouts, args.threads, True,
                                              prepare=channels_last_batch)}
    elif args.compare in ("freeze_encoder", "freeze_backbone"):
        setting = {"freeze_encoder": True, "freeze_backbone": "backbone"}[args.compare]
        names = ("trained", "frozen" if setting is True else "backbone frozen")
        frozen_cfg = dataclasses.replace(algo_cfg, freeze_encoder=setting)
        runs = {names[0]: lambda: time_update(policy, algo_cfg, recorded, index, args.rollouts, args.threads, True),
                names[1]: lambda: time_update(policy, frozen_cfg, recorded, index, args.rollouts, args.threads, True)}
    elif args.compare == "bf16":
        bf16_cfg = dataclasses.replace(algo_cfg, precision="bf16")
        with torch_threads(args.threads):  # recorded float32 log-probabilities against the bf16 update's own
            head = {k: v[:512] for k, v in batch.items()}
            lp = {c.precision: GRPO(policy, None, c).log_prob(head, to_policy_batch) for c in (algo_cfg, bf16_cfg)}
        diff = (lp["bf16"] - lp["fp32"]).abs()
        print(f"|log-prob difference| bf16 - fp32 on 512 steps: mean {diff.mean():.2e}, max {diff.max():.2e}")
        names = ("fp32", "bf16")
        runs = {name: (lambda c=c, b=b: time_update(policy, c, b, index, args.rollouts, args.threads, True))
                for name, c, b in zip(names, (algo_cfg, bf16_cfg), (recorded, batch))}
    elif args.compare == "log_prob":
        names = ("recomputed", "recorded")
        runs = {name: (lambda b=b: time_update(policy, algo_cfg, b, index, args.rollouts, args.threads, use_ref=True))
                for name, b in zip(names, (batch, recorded))}
    runs[names[0]]()  # warm-up (allocator, first-call overheads)

    times = {name: [] for name in names}
    for r in range(args.repeats):
        for name in (names if r % 2 == 0 else names[::-1]):  # alternate the order
            times[name].append(runs[name]())
            print(f"repeat {r}: {name} {times[name][-1]:.1f} s", flush=True)

    median = {name: float(np.median(t)) for name, t in times.items()}
    n_steps = args.rollouts * args.steps
    print(f"\nGRPO update ({args.compare}), {args.rollouts} rollouts x {args.steps} steps, {algo_cfg.epochs} epochs, "
          f"minibatch {algo_cfg.minibatch_size}, median of {args.repeats}")
    print(f"{'run':>12} | {'seconds':>8} | {'steps/s':>8} | ratio to {names[0]}")
    for name in names:
        print(f"{name:>12} | {median[name]:8.1f} | {n_steps * algo_cfg.epochs / median[name]:8.0f} | "
              f"{median[name] / median[names[0]]:.2f}")
    out = {"compare": args.compare, "baseline": names[0], "candidate": names[1], "rollouts": args.rollouts,
           "steps": args.steps, "epochs": algo_cfg.epochs, "minibatch_size": algo_cfg.minibatch_size,
           "threads": args.threads, "kl_coef": algo_cfg.kl_coef if args.compare != "threads" else 0.0,
           "cpu_count": os.cpu_count(), "seconds": times, "median_seconds": median,
           "time_ratio": median[names[1]] / median[names[0]]}
    if args.compare == "channels_last":
        out["max_abs_log_prob_difference"] = diff
    if args.compare == "bf16":
        out["abs_log_prob_difference"] = {"mean": diff.mean().item(), "max": diff.max().item()}
        out["cpu_bf16"] = torch.cpu._is_avx512_bf16_supported()
    path = Path(args.out or ROOT / f"benchmarks/results/grpo_{args.compare}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
