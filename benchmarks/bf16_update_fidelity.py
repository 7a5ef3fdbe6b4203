"""Is a GRPO update under bf16 autocast (``algo.precision=bf16``) the same update as float32's, on a trained policy?

``grpo_update.py --compare bf16`` times the update on random weights and images, where bf16 and float32
log-probabilities agree to ~0.004 nats. A trained policy's action means are larger and its features sharper, so this
measures on a behaviour-cloned policy (exploration std set as RL sets it) and real frames of its dataset:

- **log-probabilities**: |bf16 - float32| of the policy's own sampled actions, with the action head in float32 (what
  TinyVLA does under autocast) and with the head autocast too (what it did first);
- **one update** from the policy on ``--frames`` frames (rollouts of 8 frames, random advantages; ``--repeats``
  advantage draws), in float32 from the recorded log-probabilities, and in bf16 from the recorded float32
  log-probabilities and from log-probabilities recomputed in bf16 (the trainer's default, ``wmrl.rollout_log_prob``):
  how far each moves the policy (KL from the start, evaluated in float32), its clip fraction, and the cosine between
  its parameter change and float32's.

    python benchmarks/bf16_update_fidelity.py --policy cache/sft-<key>/pretrained_model \
        --dataset cache/demos-<key>/dataset

Prints a table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np
import torch

from vla_wmrl.algos.grpo import GRPO, GRPOConfig
from vla_wmrl.data import load_dataset
from vla_wmrl.policies import load_policy, set_exploration_std
from vla_wmrl.train import torch_threads

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = (("fp32", "fp32", True), ("bf16, recorded fp32 log-probs", "bf16", True),
            ("bf16, recomputed (default)", "bf16", False))


def frames(dataset: str, n: int, seed: int) -> dict:
    ds = load_dataset(dataset)
    items = [ds[int(i)] for i in np.random.default_rng(seed).choice(len(ds), n, replace=False)]
    batch = {k: torch.stack([it[k] for it in items]).float() for k in items[0]
             if k.startswith("observation.") and isinstance(items[0][k], torch.Tensor)}
    return dict(batch, task=[it["task"] for it in items])


def log_prob_gaps(policy, batch: dict, actions: torch.Tensor) -> dict:
    """|bf16 - fp32| log-probability, head in float32 (as TinyVLA runs) and head autocast (emulated)."""
    from vla_wmrl.policies.modeling_tiny_vla import _MEAN_BOUND

    with torch.no_grad():
        want = policy.log_prob(batch, actions)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            head_fp32 = policy.log_prob(batch, actions).float()
            raw = policy.mean_head(policy.trunk(policy.encode(batch))).float()  # the head under autocast
        _, log_std = policy._distribution(batch)
        head_bf16 = policy._action_log_prob(_MEAN_BOUND * torch.tanh(raw / _MEAN_BOUND), log_std, actions)
    out = {}
    for name, got in (("head fp32", head_fp32), ("head bf16", head_bf16)):
        d = (got - want).abs()
        out[name] = {"mean": d.mean().item(), "p90": d.quantile(0.9).item(), "max": d.max().item()}
    return out


def one_update(policy, batch: dict, actions, log_prob, precision: str, recorded: bool,
               seed: int) -> tuple[dict, torch.Tensor]:
    n = len(actions)
    index = np.repeat(np.arange(n // 8), 8)
    adv = np.random.default_rng(seed).standard_normal(n // 8)
    moved = copy.deepcopy(policy)
    steps = dict(batch, action=actions, **({"old_log_prob": log_prob} if recorded else {}))
    out = GRPO(moved, copy.deepcopy(policy), GRPOConfig(precision=precision)).update(
        steps, adv, np.ones(n // 8), index, n // 8, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        r = moved.log_prob(batch, actions) - policy.log_prob(batch, actions)
    delta = torch.cat([(a - b).flatten() for a, b in zip(moved.parameters(), policy.parameters())]).detach()
    return {"kl_from_start": ((r.exp() - 1) - r).mean().item(), "clip_frac": out["clip_frac"]}, delta


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, help="saved policy directory (pretrained_model)")
    parser.add_argument("--dataset", required=True, help="LeRobotDataset whose frames the policy acts on")
    parser.add_argument("--frames", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="advantage draws (one update each per variant)")
    parser.add_argument("--explore-std", type=float, default=0.1, help="pre-tanh exploration std (wmrl.explore_std)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/bf16_update_fidelity.json"))
    args = parser.parse_args()

    policy = load_policy(args.policy, device="cpu").eval()
    set_exploration_std(policy, args.explore_std)
    batch = frames(args.dataset, args.frames, seed=0)
    with torch_threads(args.threads):
        with torch.no_grad():
            actions, log_prob = policy.sample(batch, generator=torch.Generator().manual_seed(0))
        gaps = log_prob_gaps(policy, batch, actions)
        updates = {name: [] for name, _, _ in VARIANTS}
        for r in range(args.repeats):
            deltas = {}
            for name, precision, recorded in VARIANTS:
                stats, deltas[name] = one_update(policy, batch, actions, log_prob, precision, recorded, seed=r + 1)
                stats["cos_to_fp32"] = torch.nn.functional.cosine_similarity(deltas[name], deltas["fp32"], dim=0).item()
                updates[name].append(stats)
                print(f"repeat {r}: {name}: {stats}", flush=True)

    print(f"\n|log-prob bf16 - fp32| on {args.frames} frames of {args.dataset}:")
    for name, d in gaps.items():
        print(f"  {name}: mean {d['mean']:.3f}, p90 {d['p90']:.3f}, max {d['max']:.3f} nats")
    print(f"\none GRPO update ({args.frames} steps, mean of {args.repeats} advantage draws)")
    print(f"{'variant':>32} | KL from start | ratio to fp32 | clip frac | cos to fp32")
    summary = {}
    for name, rows in updates.items():
        summary[name] = {k: float(np.mean([row[k] for row in rows])) for k in rows[0]}
    for name, s in summary.items():
        ratio = s["kl_from_start"] / summary["fp32"]["kl_from_start"]
        print(f"{name:>32} | {s['kl_from_start']:13.4f} | {ratio:13.2f} | {s['clip_frac']:9.3f} | "
              f"{s['cos_to_fp32']:.3f}")
    out = {"policy": args.policy, "dataset": args.dataset, "frames": args.frames, "explore_std": args.explore_std,
           "threads": args.threads, "log_prob_abs_difference": gaps, "updates": updates, "summary": summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
