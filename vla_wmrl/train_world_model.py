"""Train a world model on LeRobotDatasets: next frames, next states, reward and success from context + actions.

Usage::

    python -m vla_wmrl.train_world_model sim=robosuite_lift world_model=conv \
        dataset=[data/robosuite_lift/expert_50,data/robosuite_lift/noisy_100]
    python -m vla_wmrl.train_world_model ... resume=true          # continue from the last checkpoint
    python -m vla_wmrl.train_world_model sim=none dataset=data/so101_pick_cube   # shapes from the dataset alone

Every frame is decoded once into memory (a few thousand 64x64 frames are a few tens of MB); training windows
(``context`` past frames, ``rollout_steps`` actions and what followed them) are then cut from those tensors with the
same index arithmetic LeRobot's ``delta_timestamps`` would use, including padding the context by repeating an
episode's first frame, without decoding video on every step.

Checkpoints go to ``<run dir>/checkpoints/last`` (``model.safetensors`` + ``config.json`` + ``train_state.pt``),
swapped in atomically. The run dir is fixed per ``run_name``, so ``resume=true`` finds it.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

import world_models
from vla_wmrl.config import SimConfig, to_dataclass, write_summary
from world_models.base import ACTIONS, FRAME_MASK, FRAMES, REWARD, STATES, STEP_MASK, SUCCESS, WorldModel

log = logging.getLogger(__name__)


@dataclass
class TrainWorldModelConfig:
    """Training options (the model's own options live in its ``configs/world_model/<name>.yaml``)."""

    dataset: list[str] = field(default_factory=list)  # one or more LeRobotDataset roots
    steps: int = 100_000           # optimisation steps (upper bound; max_minutes usually ends the run first)
    max_minutes: float = 20.0      # wall-clock budget of this invocation, minutes
    batch_size: int = 16           # windows per step
    lr: float = 1e-3               # AdamW learning rate (cosine-decayed to lr / 10 over the step budget, or over
                                   # the time budget when it will end training first: schedule_progress)
    weight_decay: float = 1e-4     # AdamW weight decay
    grad_clip: float = 1.0         # gradient-norm clip
    val_episodes: int = 4          # episodes held out from the last dataset for validation scalars
    log_every: int = 25            # steps between TensorBoard scalars
    val_every: int = 200           # steps between validation passes
    ckpt_minutes: float = 2.0      # minutes between checkpoints
    resume: bool = False           # continue from <run dir>/checkpoints/last
    overwrite: bool = False        # start over even if a checkpoint exists
    seed: int = 0                  # seeds init, window sampling and noise
    num_threads: int = 2           # torch CPU threads (the machines are shared)
    device: str = "cpu"            # cpu | cuda
    precision: str = "fp32"        # fp32 | bf16 (autocast of the training forward pass; weights, optimiser and
                                   # validation stay fp32); bf16 needs CPU/GPU support (benchmarks/wm_train_speed.py)


PRECISIONS = ("fp32", "bf16")


def autocast(device: str, precision: str):
    """The training forward pass's autocast context for ``precision`` (a no-op for fp32).

    Raises:
        ValueError: an unknown precision, naming the valid ones.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown world-model training precision {precision!r}; valid: {list(PRECISIONS)}")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss; the last good checkpoint was kept."""


# ---------------------------------------------------------------------------------------------------------------- #
# Data
# ---------------------------------------------------------------------------------------------------------------- #
def check_dataset_matches(root: str | Path, image_keys: list[str], image_size: int, state_dim: int,
                          action_dim: int, what: str = "sim") -> None:
    """Fail when a dataset's cameras, image size, state or action dimension differ from the environment's.

    Raises:
        ValueError: naming the dataset's value and the environment's for every mismatch.
    """
    from vla_wmrl.dataset_spec import dataset_spec

    spec = dataset_spec(root)
    problems = []
    if sorted(spec.image_keys) != sorted(image_keys):
        problems.append(f"cameras: dataset {spec.image_keys} vs {what} {image_keys}")
    for key in set(spec.image_keys) & set(image_keys):
        cam = key.removeprefix("observation.images.")
        h, w, _ = spec.image_shapes[cam]
        if (h, w) != (image_size, image_size):
            problems.append(f"image size of {cam}: dataset {h}x{w} vs {what} {image_size}x{image_size}")
    if spec.action_dim != action_dim:
        problems.append(f"action dimension: dataset {spec.action_dim} vs {what} {action_dim}")
    if spec.state_dim != state_dim:
        problems.append(f"state dimension: dataset {spec.state_dim} vs {what} {state_dim}")
    if problems:
        raise ValueError(f"dataset {root} does not match the {what}: " + "; ".join(problems))


@dataclass
class EpisodeData:
    """Every frame of some datasets in memory. Frames (N, C, H, W) uint8 (cameras stacked); the rest per frame."""

    frames: torch.Tensor
    states: torch.Tensor       # (N, D)
    actions: torch.Tensor      # (N, A)
    reward: torch.Tensor       # (N,) next.reward
    success: torch.Tensor      # (N,) next.success as float
    ep_start: torch.Tensor     # (N,) global index of the frame's episode's first frame
    ep_end: torch.Tensor       # (N,) one past its last frame
    episodes: list[tuple[int, int]]  # (start, end) per episode

    def __len__(self) -> int:
        return self.frames.shape[0]

    def subset(self, episode_ids) -> "EpisodeData":
        """The frames of the given episodes (indices into ``episodes``), re-indexed."""
        idx = torch.cat([torch.arange(*self.episodes[e]) for e in episode_ids])
        lengths = [self.episodes[e][1] - self.episodes[e][0] for e in episode_ids]
        return assemble_episodes(self.frames[idx], self.states[idx], self.actions[idx], self.reward[idx], self.success[idx],
                         lengths)


def assemble_episodes(frames, states, actions, reward, success, lengths) -> EpisodeData:
    """Per-frame tensors of consecutive episodes of the given ``lengths`` as :class:`EpisodeData`."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    episodes = [(int(s), int(s + n)) for s, n in zip(starts, lengths)]
    ep_start = torch.cat([torch.full((n,), s) for s, n in zip(starts, lengths)])
    return EpisodeData(frames, states, actions, reward, success, ep_start, ep_start + torch.cat(
        [torch.full((n,), n) for n in lengths]), episodes)


def load_episodes(roots: list[str | Path], image_keys: list[str]) -> EpisodeData:
    """Decode every frame of the datasets at ``roots`` into one :class:`EpisodeData` (episodes in dataset order)."""
    from vla_wmrl.data import load_dataset

    parts = {k: [] for k in ("frames", "states", "actions", "reward", "success")}
    lengths = []
    for root in roots:
        ds = load_dataset(root)
        labelled = "next.success" in ds.meta.features
        if not labelled:
            log.warning("%s has no next.success (a lerobot-record dataset): its episodes are taken as successful "
                        "demonstrations, success (and reward 1) at each episode's last frame", root)
        loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=False, num_workers=0)
        ep_index = []
        for item in tqdm(loader, desc=f"decode {Path(root).name}", unit="batch", leave=False):
            ims = torch.cat([item[k] for k in image_keys], dim=1)  # (b, C, H, W) float in [0, 1]
            parts["frames"].append((ims * 255).round().to(torch.uint8))
            parts["states"].append(item["observation.state"].float())
            parts["actions"].append(item["action"].float())
            if labelled:
                parts["reward"].append(item["next.reward"].float().reshape(-1))
                parts["success"].append(item["next.success"].float().reshape(-1))
            ep_index.append(item["episode_index"].reshape(-1))
        ep_index = torch.cat(ep_index)
        # Frames come in episode order; count each episode's run.
        _, counts = torch.unique_consecutive(ep_index, return_counts=True)
        lengths += counts.tolist()
        if not labelled:
            last = torch.cat([(torch.arange(n) == n - 1).float() for n in counts.tolist()])
            parts["reward"].append(last)
            parts["success"].append(last.clone())
    cat = {k: torch.cat(v) for k, v in parts.items()}
    return assemble_episodes(cat["frames"], cat["states"], cat["actions"], cat["reward"], cat["success"], lengths)


def make_windows(data: EpisodeData, index: torch.Tensor, context: int, steps: int) -> dict[str, torch.Tensor]:
    """Training windows starting at frames ``index`` (B,): the batch layout of :meth:`WorldModel.loss`.

    Context frames before an episode's start repeat its first frame; steps past its end are masked.
    """
    start, end = data.ep_start[index][:, None], data.ep_end[index][:, None]
    offs = torch.arange(-context + 1, steps + 1)[None]  # context frames, then the K frames that follow
    frame_idx = (index[:, None] + offs).clamp(min=start, max=end - 1)  # (B, T + K)
    step_idx = index[:, None] + torch.arange(steps)[None]  # (B, K)
    step_mask = (step_idx < end).float()
    frame_mask = (step_idx + 1 < end).float()  # the frame after an episode's last action was never recorded
    step_idx = step_idx.clamp(max=end - 1)
    return {FRAMES: data.frames[frame_idx].float() / 255.0, STATES: data.states[frame_idx],
            ACTIONS: data.actions[step_idx], REWARD: data.reward[step_idx], SUCCESS: data.success[step_idx],
            STEP_MASK: step_mask, FRAME_MASK: frame_mask}


def success_window_starts(data: EpisodeData, steps: int) -> torch.Tensor:
    """Frame indices whose ``steps``-step window (:func:`make_windows`) holds a success label of its own episode."""
    succ = torch.nonzero(data.success > 0.5).flatten()
    starts = (succ[:, None] - torch.arange(steps)[None]).flatten()
    return torch.unique(starts[starts >= data.ep_start[succ].repeat_interleave(steps)])


def sample_starts(data: EpisodeData, n: int, gen: torch.Generator, steps: int, success_frac: float = 0.0) -> torch.Tensor:
    """``n`` window starts drawn uniformly over frames, except that ``round(success_frac * n)`` of them are drawn from
    the windows holding a success label (when ``data`` has any). A successful episode has one success frame, so
    uniform windows hold one about ``steps / length`` of the time, and a success head trained on them drifts to 0."""
    if not 0.0 <= success_frac <= 1.0:
        raise ValueError(f"success_frac must be in [0, 1], got {success_frac}")
    pool = success_window_starts(data, steps) if success_frac > 0 else torch.zeros(0, dtype=torch.long)
    k = round(success_frac * n) if len(pool) else 0
    uniform = torch.randint(len(data), (n - k,), generator=gen)
    return torch.cat([pool[torch.randint(len(pool), (k,), generator=gen)], uniform]) if k else uniform


def finetune(model: WorldModel, opt: torch.optim.Optimizer, new: EpisodeData, old: EpisodeData, steps: int,
             gen: torch.Generator, batch_size: int = 32, success_frac: float = 0.0, grad_clip: float = 1.0) -> list[float]:
    """``steps`` gradient steps on batches of half windows from ``new`` episodes (``success_frac`` of those holding a
    success label, :func:`sample_starts`) and half from the ``old`` training data, so the model follows new real
    episodes without forgetting. Returns the losses; stops early, with a warning, at a non-finite loss."""
    model.train()
    half = batch_size // 2
    K, T = model.cfg.rollout_steps, model.cfg.context
    losses = []
    for _ in range(steps):
        parts = [make_windows(new, sample_starts(new, half, gen, K, success_frac), T, K),
                 make_windows(old, torch.randint(len(old), (batch_size - half,), generator=gen), T, K)]
        loss, _ = model.loss({k: torch.cat([p[k] for p in parts]) for k in parts[0]}, generator=gen)
        if not torch.isfinite(loss):
            log.warning("world-model fine-tune loss is %s; stopping this fine-tune", float(loss))
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image, for pixels in [0, 1]: -10 log10(MSE). (..., C, H, W) -> (...)."""
    mse = ((pred - target) ** 2).mean(dim=(-3, -2, -1)).clamp_min(1e-10)
    return -10 * torch.log10(mse)


# ---------------------------------------------------------------------------------------------------------------- #
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------- #
def save_checkpoint(ckpt_dir: Path, model: WorldModel, train_state: dict) -> Path:
    """Write the model and the optimiser/progress state to ``ckpt_dir/last``, swapped in atomically."""
    tmp, last, old = ckpt_dir / "last.tmp", ckpt_dir / "last", ckpt_dir / "last.old"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(tmp)
    torch.save(train_state, tmp / "train_state.pt")
    if last.exists():
        os.replace(last, old)
    os.replace(tmp, last)
    shutil.rmtree(old, ignore_errors=True)
    return last


def last_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint in ``ckpt_dir`` (``last``, or ``last.old`` if a swap was interrupted)."""
    for name in ("last", "last.old"):
        if (ckpt_dir / name / "train_state.pt").exists():
            return ckpt_dir / name
    return None


# ---------------------------------------------------------------------------------------------------------------- #
# Training
# ---------------------------------------------------------------------------------------------------------------- #
def task_shapes(sim: SimConfig | None, dataset: str | Path) -> tuple[list[str], int, int, int]:
    """Image keys, image size, state and action dimensions of the simulator (made once, then closed), or, with
    ``sim=None``, of the dataset (from its metadata)."""
    if sim is None:
        from vla_wmrl.dataset_spec import dataset_spec

        spec = dataset_spec(dataset)
        return spec.image_keys, spec.square_image_size, spec.state_dim, spec.action_dim
    import sims

    env = sims.make_env(sim.name, **sim.env_kwargs())
    try:
        keys = [k for k in env.observation_space.spaces if k.startswith("observation.images.")]
        return keys, sim.image_size, env.observation_space["observation.state"].shape[0], env.action_space.shape[0]
    finally:
        env.close()


@torch.no_grad()
def validate(model: WorldModel, val: EpisodeData, gen: torch.Generator, n: int = 64) -> dict[str, float]:
    """Loss and one-step PSNR (model vs copy-last-frame) on a fixed-size sample of validation windows."""
    model.eval()
    idx = torch.randint(len(val), (n,), generator=gen)
    batch = make_windows(val, idx, model.cfg.context, model.cfg.rollout_steps)
    loss, metrics = model.loss(batch, generator=gen)
    T = model.cfg.context
    out = model.step(batch[FRAMES][:, :T], batch[STATES][:, :T], batch[ACTIONS][:, 0], generator=gen)
    m = batch[FRAME_MASK][:, 0] > 0
    target = batch[FRAMES][:, T]
    model.train()
    return {"loss": float(loss.detach()), **metrics, "psnr_1step": float(psnr(out.frame, target)[m].mean()),
            "psnr_copy_last": float(psnr(batch[FRAMES][:, T - 1], target)[m].mean())}


def time_binds(step: int, steps: int, trained_s: float, budget_s: float) -> bool | None:
    """Whether the time budget will end training before the step budget, judged at the rate so far once a tenth of
    either budget has passed (None before then)."""
    if step < steps / 10 and trained_s < budget_s / 10:
        return None
    return trained_s * steps / max(step, 1) > budget_s


def schedule_progress(step: int, steps: int, trained_s: float, budget_s: float, time_bound: bool) -> float:
    """Position in [0, 1] of the cosine learning-rate schedule. It follows the step budget, so that a run's learning
    rates, and with them its weights, do not depend on how fast the machine was at each moment; a run that the time
    budget will end first (``time_bound``) follows whichever budget is nearer its end, so its rate still decays."""
    progress = step / steps
    if time_bound:
        progress = max(progress, trained_s / budget_s)
    return min(1.0, progress)


def train(cfg: TrainWorldModelConfig, model_cfg: dict, sim: SimConfig | None, run_dir: str | Path) -> dict:
    """Train world model ``model_cfg["name"]`` on ``cfg.dataset``; checkpoints and TensorBoard under ``run_dir``.
    Shapes come from ``sim``, or from the (first) dataset when ``sim`` is None.

    Returns:
        Summary figures (also written to ``run_dir/summary.json``).

    Raises:
        ValueError: a dataset does not match the simulator, or a checkpoint does not match the model.
        FileExistsError: a checkpoint exists and neither ``resume`` nor ``overwrite`` was given.
        NonFiniteLossError: the loss became NaN/inf (the last good checkpoint is kept).
    """
    from torch.utils.tensorboard import SummaryWriter

    amp = autocast(cfg.device, cfg.precision)  # fails on an unknown precision before any work
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    run_dir, t_start = Path(run_dir), time.perf_counter()
    ckpt_dir = run_dir / "checkpoints"
    resume_from = last_checkpoint(ckpt_dir)
    if resume_from and not (cfg.resume or cfg.overwrite):
        raise FileExistsError(f"{resume_from} exists; pass resume=true to continue it or overwrite=true to start over")
    if cfg.overwrite and not cfg.resume:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        resume_from = None
    roots = [cfg.dataset] if isinstance(cfg.dataset, str) else list(cfg.dataset)
    if not roots:
        raise ValueError("no dataset given; pass dataset=<path> or dataset=[path1,path2]")

    image_keys, image_size, state_dim, action_dim = task_shapes(sim, roots[0])
    for root in roots:
        check_dataset_matches(root, image_keys, image_size, state_dim, action_dim,
                              what=f"sim {sim.name}" if sim else f"dataset {roots[0]}")
    model = world_models.make_world_model(model_cfg["name"], {
        **model_cfg, "image_keys": image_keys, "image_size": image_size, "state_dim": state_dim,
        "action_dim": action_dim}).to(cfg.device)

    data = load_episodes(roots, image_keys)
    n_ep = len(data.episodes)
    n_val = min(cfg.val_episodes, n_ep - 1)
    train_data, val_data = data.subset(range(n_ep - n_val)), data.subset(range(n_ep - n_val, n_ep))
    log.info("%d frames in %d episodes (%d held out for validation)", len(data), n_ep, n_val)

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    step, trained_s = 0, 0.0
    if resume_from:
        model.load_weights(resume_from)  # raises ValueError when the checkpoint is another model
        state = torch.load(resume_from / "train_state.pt", weights_only=False)
        opt.load_state_dict(state["optimizer"])
        step, trained_s = state["step"], state["trained_seconds"]
        log.info("resumed from %s at step %d", resume_from, step)
    else:
        model.set_state_stats(train_data.states.mean(0), train_data.states.std(0))
    model.train()
    budget_s = trained_s + 60 * cfg.max_minutes  # the cosine schedule spans the whole (resumed) budget
    gen = torch.Generator().manual_seed(cfg.seed + step)
    val_gen_seed = cfg.seed + 12345
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    last_ckpt_t, last_val, status = time.perf_counter(), {}, "completed"
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {model_cfg['name']}", unit="step")
    t0 = time.perf_counter()
    trained0 = trained_s
    save_state = lambda: {"optimizer": opt.state_dict(), "step": step, "trained_seconds": trained_s}  # noqa: E731
    lr = None  # the last step's learning rate (None: no step ran)
    time_bound = None  # will the time budget end training before the step budget? (decided once, time_binds)
    try:
        while step < cfg.steps:
            trained_s = trained0 + time.perf_counter() - t0
            if trained_s >= budget_s:
                status = "time_budget"
                break
            if time_bound is None:
                time_bound = time_binds(step, cfg.steps, trained_s, budget_s)
            progress = schedule_progress(step, cfg.steps, trained_s, budget_s, bool(time_bound))
            lr = cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
            for g in opt.param_groups:
                g["lr"] = lr
            idx = torch.randint(len(train_data), (cfg.batch_size,), generator=gen)
            batch = {k: v.to(cfg.device) for k, v in
                     make_windows(train_data, idx, model.cfg.context, model.cfg.rollout_steps).items()}
            with amp:
                loss, metrics = model.loss(batch, generator=gen if cfg.device == "cpu" else None)
            if not torch.isfinite(loss):
                kept = last_checkpoint(ckpt_dir)
                status = "nonfinite_loss"
                raise NonFiniteLossError(
                    f"loss became {float(loss.detach())} at step {step}; training stopped. Last good checkpoint kept: "
                    f"{kept or 'none was written yet'}. Try a lower lr or grad_clip.")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            bar.update(1)
            if step % cfg.log_every == 0:
                for k, v in {"loss": float(loss.detach()), **metrics, "grad_norm": float(grad_norm), "lr": lr}.items():
                    writer.add_scalar(f"train/{k}", v, step)
                bar.set_postfix(loss=f"{float(loss.detach()):.4f}", psnr=last_val.get("psnr_1step", float("nan")))
            if step % cfg.val_every == 0:
                last_val = validate(model, val_data, torch.Generator().manual_seed(val_gen_seed))
                for k, v in last_val.items():
                    writer.add_scalar(f"val/{k}", v, step)
            if time.perf_counter() - last_ckpt_t > 60 * cfg.ckpt_minutes:
                save_checkpoint(ckpt_dir, model, save_state())
                last_ckpt_t = time.perf_counter()
        trained_s = trained0 + time.perf_counter() - t0
        save_checkpoint(ckpt_dir, model, save_state())
        last_val = validate(model, val_data, torch.Generator().manual_seed(val_gen_seed))
    finally:
        bar.close()
        writer.close()
        summary = {"status": status, "world_model": model_cfg["name"], "sim": sim.name if sim else None,
                   "datasets": roots,
                   "frames": len(data), "episodes": n_ep, "steps": step, "final_lr": lr, "trained_minutes": trained_s / 60,
                   "wall_minutes": (time.perf_counter() - t_start) / 60, "checkpoint": str(ckpt_dir / "last"),
                   "parameters": sum(p.numel() for p in model.parameters()), "val": last_val,
                   "model_config": asdict(model.cfg), "train_config": asdict(cfg)}
        write_summary(run_dir, summary)
    return summary


@hydra.main(config_path="../configs", config_name="train_world_model", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    sim = to_dataclass(SimConfig, cfg.sim) if cfg.get("sim") is not None else None
    model_cfg = OmegaConf.to_container(cfg.world_model, resolve=True)
    world_models.make_config(model_cfg["name"], model_cfg)  # fail on a misspelt model key before loading data
    train_keys = {k: v for k, v in cfg.items() if k not in ("sim", "world_model", "run_name")}
    if isinstance(train_keys.get("dataset"), str):
        train_keys["dataset"] = [train_keys["dataset"]]
    train_cfg = to_dataclass(TrainWorldModelConfig, OmegaConf.create(train_keys))
    summary = train(train_cfg, model_cfg, sim, HydraConfig.get().runtime.output_dir)
    log.info("%s after %d steps (%.1f min): val %s -> %s", summary["status"], summary["steps"],
             summary["trained_minutes"], summary["val"], summary["checkpoint"])
    return summary


if __name__ == "__main__":
    main()
