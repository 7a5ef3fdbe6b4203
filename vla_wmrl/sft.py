"""Behaviour cloning (supervised fine-tuning) of a registered policy on a LeRobotDataset.

Usage::

    python -m vla_wmrl.sft sim=robosuite_lift dataset=data/robosuite_lift/expert_50 episodes=10 steps=1100
    python -m vla_wmrl.sft sim=mujoco_reach dataset=data/mujoco_reach/expert_100 steps=500 policy.hidden_dim=128
    python -m vla_wmrl.sft sim=none dataset=data/so101_pick_cube steps=2000     # a robot's dataset, no simulator

With a simulator the policy acts in its normalised [-1, 1] action box and must fit its observations; without one
(``sim=none``) the dataset alone defines the task and the policy acts in the dataset's recorded action range (a real
arm's joint units).

The dataset is small (tens of episodes), so it is decoded once into memory and minibatches are drawn from tensors:
no video decoding in the training loop. Writes TensorBoard scalars (``tb/``), atomic checkpoints
(``checkpoints/step_NNNNNN``), the final ``pretrained_model/`` (LeRobot ``save_pretrained``) and ``summary.json``.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from vla_wmrl.config import SimConfig, to_dataclass, write_summary

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    """Behaviour-cloning run settings (the top level of ``configs/sft.yaml`` minus ``sim`` and ``policy``)."""

    dataset: str = "data/robosuite_lift/expert_50"  # LeRobotDataset root
    episodes: int | None = None    # train on the first N episodes (None = all)
    steps: int = 2000              # optimisation steps (the run stops at steps or max_minutes, whichever is first)
    max_minutes: float | None = None  # wall-clock limit of the training loop
    batch_size: int = 64
    lr: float | None = None        # None = the policy's optimizer preset
    seed: int = 0
    threads: int = 1               # torch CPU threads (one is fastest on a shared machine)
    device: str = "cpu"
    log_every: int = 50            # steps between TensorBoard/progress-bar updates
    save_every: int = 500          # steps between checkpoints (0 = only the final one)
    keep_checkpoints: int = 2      # most recent checkpoints kept


# ------------------------------------------------------------------------------------------------------------- #
def load_frames(root: str | Path, episodes: int | None = None) -> tuple[dict, object]:
    """Decode a LeRobotDataset (or its first ``episodes`` episodes) into memory.

    Returns:
        ``(frames, meta)``: frames holds uint8 images (N, 3, H, W) per camera, float state/action tensors and the
        ``task`` strings (a list of N); meta is the dataset's ``LeRobotDatasetMetadata`` (features and statistics).
    """
    from vla_wmrl.data import load_dataset

    ds = load_dataset(root)
    if episodes is not None:
        if not 1 <= episodes <= ds.meta.total_episodes:
            raise ValueError(f"episodes={episodes} but {root} holds {ds.meta.total_episodes} episodes")
        ds = load_dataset(root, episodes=list(range(episodes)))
    keys = [k for k in ds.meta.features if k.startswith("observation.")] + ["action"]
    chunks: dict[str, list] = {k: [] for k in keys}
    tasks: list[str] = []
    loader = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=False, num_workers=0)
    for batch in loader:
        for k in keys:
            v = batch[k]
            chunks[k].append((v * 255).round().to(torch.uint8) if k.startswith("observation.images.") else v.float())
        tasks += list(batch["task"])
    frames = {k: torch.cat(v) for k, v in chunks.items()}
    frames["task"] = tasks
    return frames, ds.meta


def sample_batch(frames: dict, idx: torch.Tensor, device: str) -> dict:
    """A training batch (LeRobot layout, images float in [0, 1]) of the frames at ``idx``."""
    batch = {}
    for k, v in frames.items():
        if k == "task":
            batch[k] = [v[i] for i in idx.tolist()]
        elif k.startswith("observation.images."):
            batch[k] = v[idx].to(device).float().div_(255.0)
        else:
            batch[k] = v[idx].to(device)
    return batch


def build_policy(name: str, policy_kwargs: dict, meta, dataset: str | Path, sim: SimConfig | None = None,
                 device: str = "cpu"):
    """A fresh policy for a dataset (shapes and state statistics from its metadata).

    With ``sim`` the policy acts in the simulator's [-1, 1] action box and is checked against the simulator's
    spaces; with ``sim=None`` it acts in the dataset's recorded action range.

    Raises:
        ValueError: the dataset does not fit the simulator, or has no action statistics (``sim=None``).
    """
    from vla_wmrl.policies import check_env_compat, make_policy, make_policy_config

    if sim is None:
        from vla_wmrl.dataset_spec import dataset_spec

        spec = dataset_spec(dataset)
        if spec.action_min is None:
            raise ValueError(f"dataset {dataset} has no action statistics (meta/stats.json); they define the "
                             f"policy's action range without a simulator")
        policy_kwargs = {**policy_kwargs, "action_low": spec.action_min.tolist(),
                         "action_high": spec.action_max.tolist()}
    policy = make_policy(make_policy_config(name, device=device, **policy_kwargs), meta)
    if sim is not None:
        import sims

        env = sims.make_env(sim.name, **sim.env_kwargs())  # fail now, not at evaluation, if the data does not fit
        try:
            check_env_compat(policy.config, env.observation_space, env.action_space, source=f"dataset {dataset}")
        finally:
            env.close()
    return policy


def save_atomic(policy, path: Path) -> Path:
    """``save_pretrained`` into a temporary sibling directory, then rename it into place (a reader never sees a
    half-written checkpoint)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    if path.exists():  # os.replace cannot replace a non-empty directory: move the old one aside first
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    return path


def train(policy, frames: dict, cfg: SFTConfig, run_dir: Path) -> dict:
    """The behaviour-cloning loop: sample a minibatch, ``loss = policy(batch)``, AdamW step; log, checkpoint."""
    from torch.utils.tensorboard import SummaryWriter

    preset = policy.config.get_optimizer_preset()
    if cfg.lr is not None:
        preset.lr = cfg.lr
    optimizer = preset.build(policy.get_optim_params())
    writer = SummaryWriter(str(run_dir / "tb"))
    n = len(frames["task"])
    gen = torch.Generator().manual_seed(cfg.seed)
    deadline = time.perf_counter() + cfg.max_minutes * 60 if cfg.max_minutes else math.inf
    ckpt_dir = run_dir / "checkpoints"
    losses, first_loss, step, t0 = [], None, 0, time.perf_counter()
    policy.train()
    with tqdm(total=cfg.steps, desc="sft", unit="step") as bar:
        while step < cfg.steps and time.perf_counter() < deadline:
            batch = sample_batch(frames, torch.randint(0, n, (cfg.batch_size,), generator=gen), cfg.device)
            loss, metrics = policy(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), preset.grad_clip_norm)
            optimizer.step()
            step += 1
            losses.append(loss.item())
            first_loss = losses[0] if first_loss is None else first_loss
            if step % cfg.log_every == 0 or step == 1:
                recent = float(np.mean(losses[-cfg.log_every:]))
                for k, v in {"loss": recent, "grad_norm": grad_norm.item(), **metrics}.items():
                    writer.add_scalar(f"train/{k}", v, step)
                writer.add_scalar("train/steps_per_second", step / (time.perf_counter() - t0), step)
                bar.set_postfix(loss=f"{recent:.4f}", mse=f"{metrics['mse']:.4f}")
            bar.update(1)
            if cfg.save_every and step % cfg.save_every == 0:
                save_atomic(policy, ckpt_dir / f"step_{step:06d}")
                for old in sorted(ckpt_dir.glob("step_*"))[: -cfg.keep_checkpoints]:
                    shutil.rmtree(old, ignore_errors=True)
    seconds = time.perf_counter() - t0
    policy.eval()
    final = save_atomic(policy, run_dir / "pretrained_model")
    writer.close()
    tail = max(1, min(len(losses), cfg.log_every))
    return {"steps": step, "seconds": seconds, "first_loss": first_loss, "final_loss": float(np.mean(losses[-tail:])),
            "frames_per_second": step * cfg.batch_size / seconds, "policy_path": str(final)}


@hydra.main(config_path="../configs", config_name="sft", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    sim = to_dataclass(SimConfig, cfg.sim) if cfg.get("sim") is not None else None
    sft = to_dataclass(SFTConfig, OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("sim", "policy")]))
    policy_kwargs = OmegaConf.to_container(cfg.policy, resolve=True)
    name = policy_kwargs.pop("name")
    torch.set_num_threads(sft.threads)
    torch.manual_seed(sft.seed)
    run_dir = Path(HydraConfig.get().runtime.output_dir)

    frames, meta = load_frames(sft.dataset, sft.episodes)
    policy = build_policy(name, policy_kwargs, meta, sft.dataset, sim, sft.device)
    n_params = sum(p.numel() for p in policy.parameters())
    episodes = sft.episodes or meta.total_episodes
    log.info("%s (%d parameters) on %d frames of %d episodes from %s", name, n_params, len(frames["task"]),
             episodes, sft.dataset)
    summary = {"sim": sim.name if sim else None, "policy": name, "parameters": n_params, "dataset": sft.dataset,
               "episodes": episodes, "frames": len(frames["task"]), "tasks": sorted(set(frames["task"])),
               **train(policy, frames, sft, run_dir)}
    path = write_summary(run_dir, summary)
    log.info("loss %.4f -> %.4f in %d steps (%.0f s); policy %s (summary %s)", summary["first_loss"],
             summary["final_loss"], summary["steps"], summary["seconds"], summary["policy_path"], path)
    return summary


if __name__ == "__main__":
    main()
