"""Does fine-tuning the world model on new real episodes keep its success predictions, or wreck them?

The trainer can fine-tune the world model on its recent real rollouts (``wmrl.wm_finetune_every``), so that it
follows the changing policy; on Lift every fine-tune measured so far damaged the success head
(docs/world_models.md). This benchmark isolates that step: episodes of a *changed* policy (recorded with
``vla_wmrl.collect policy_path=... explore_std=0.1``) are split into a fine-tuning stream and held-out episodes; the
world model is fine-tuned in ``--rounds`` rounds, each adding ``1/rounds`` of the stream to the new-episode pool and
running ``--steps`` gradient steps (the trainer's ``train_world_model.finetune``: half windows from the pool, half
from the original data, fresh AdamW at ``--lr``), and after the last round every held-out episode is imagined from
its first frame with its real actions (``eval_world_model.whole_episodes``). Arms, side by side from the same
checkpoint: no fine-tuning, uniform windows (``success_frac`` 0, the trainer's default) and success-balanced windows.

Figures per arm (mean over ``--seeds`` fine-tuning seeds): the AUROC of the predicted success at each episode's last
step against its real outcome (does the score still rank episodes?), the Brier score, and the mean predicted success
of the successful and of the failed episodes.

    python benchmarks/wm_finetune.py --world-model cache/world_model-<hash>/checkpoints/last \\
        --new data/robosuite_lift/wm_finetune_rl80 [--fracs 0 0.25 0.5] [--seeds 3]

Prints a table and writes ``benchmarks/results/wm_finetune.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402
import torch  # noqa: E402


def score(model, held, seed: int) -> dict:
    from vla_wmrl.eval_world_model import auroc, whole_episodes

    eps = whole_episodes(model, held, torch.Generator().manual_seed(seed), batch_size=16)
    p = np.array([e["prob"][-1] for e in eps])
    y = np.array([e["real_success"] for e in eps], dtype=float)
    return {"auroc_end": auroc(p, y), "brier_end": float(np.mean((p - y) ** 2)),
            "mean_prob_successes": float(p[y > 0.5].mean()), "mean_prob_failures": float(p[y < 0.5].mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-model", required=True, help="checkpoint directory (…/checkpoints/last)")
    parser.add_argument("--new", required=True, help="LeRobotDataset of the changed policy's episodes")
    parser.add_argument("--old", nargs="*", help="the world model's training datasets (default: from its summary)")
    parser.add_argument("--fracs", type=float, nargs="+", default=[0.0, 0.5], help="success_frac arms")
    parser.add_argument("--rounds", type=int, default=4, help="fine-tunes (a 20-update run every 5 updates: 4)")
    parser.add_argument("--steps", type=int, default=30, help="gradient steps per fine-tune (wmrl.wm_finetune_steps)")
    parser.add_argument("--lr", type=float, default=1e-4, help="wmrl.wm_finetune_lr")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/wm_finetune.json")
    args = parser.parse_args()

    from vla_wmrl.train_world_model import finetune, load_episodes
    from world_models import load_world_model

    torch.set_num_threads(args.threads)
    ckpt = Path(args.world_model)
    old_roots = args.old or json.loads((ckpt.parents[1] / "summary.json").read_text())["datasets"]
    image_keys = load_world_model(ckpt).cfg.image_keys
    old = load_episodes(old_roots, image_keys)
    new_all = load_episodes([args.new], image_keys)
    n = len(new_all.episodes)
    stream, held = list(range(n // 2)), new_all.subset(range(n // 2, n))
    outcome = lambda d: [bool(d.success[e - 1] > 0.5) for _, e in d.episodes]  # noqa: E731
    print(f"{len(old)} original frames; new: {len(stream)} fine-tuning episodes "
          f"(success {np.mean(outcome(new_all.subset(stream))):.2f}), {n - n // 2} held out "
          f"(success {np.mean(outcome(held)):.2f})", flush=True)

    arms = {"none": None} | {f"success_frac={f:g}": f for f in args.fracs}
    results: dict = {}
    for name, frac in arms.items():
        runs = []
        for seed in range(1 if frac is None else args.seeds):
            t0 = time.perf_counter()
            model = load_world_model(ckpt)
            losses = []
            if frac is not None:
                opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
                gen = torch.Generator().manual_seed(seed)
                for r in range(1, args.rounds + 1):
                    pool = new_all.subset(stream[: max(1, round(r * len(stream) / args.rounds))])
                    losses += finetune(model, opt, pool, old, args.steps, gen, success_frac=frac)
            model.eval()
            runs.append(score(model, held, seed) | {"seed": seed, "finetune_loss_mean": float(np.mean(losses))
                                                    if losses else None, "seconds": time.perf_counter() - t0})
            print(f"  {name} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[-1].items()
                                                      if isinstance(v, float)), flush=True)
        keys = ("auroc_end", "brier_end", "mean_prob_successes", "mean_prob_failures")
        results[name] = {"runs": runs} | {k: float(np.mean([r[k] for r in runs])) for k in keys} | {
            f"{k}_sd": float(np.std([r[k] for r in runs], ddof=1)) if len(runs) > 1 else None for k in keys}

    print(f"\nheld-out episodes of the changed policy: {len(held.episodes)}; {args.rounds} fine-tunes x {args.steps} "
          f"steps at lr {args.lr:g}; mean over seeds (sd)")
    print("| arm | AUROC (end) | Brier (end) | mean p, successes | mean p, failures |")
    print("|---|---|---|---|---|")
    fmt = lambda r, k: f"{r[k]:.3f}" + (f" ({r[k + '_sd']:.3f})" if r[k + "_sd"] is not None else "")  # noqa: E731
    for name, r in results.items():
        print(f"| {name} | {fmt(r, 'auroc_end')} | {fmt(r, 'brier_end')} | {fmt(r, 'mean_prob_successes')} | "
              f"{fmt(r, 'mean_prob_failures')} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "old": old_roots, "held_out_episodes": len(held.episodes),
                               "held_out_success": float(np.mean(outcome(held))), "arms": results}, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
