"""Evaluate a trained world model on held-out episodes.

Usage::

    python -m vla_wmrl.eval_world_model sim=robosuite_lift \
        checkpoint=outputs/train_world_model/robosuite_lift_conv/checkpoints/last dataset=data/robosuite_lift/heldout_40

Figures (all from real context frames and the real recorded actions, rolled out open-loop):

- ``open_loop``: PSNR and SSIM of the predicted frame k steps ahead (k in ``ks``), beside copying the last real frame;
  rollouts start every ``stride`` frames and are scored where the real frame k steps later exists.
- ``success_auroc_one_step``: predicted success probability after each real step vs ``next.success``.
- ``success_auroc_episode_end``: each held-out episode imagined from its first frame with its whole action sequence;
  the predicted success at the last step (and, ``..._any``, the largest along the way) vs the episode's real outcome.
- ``reward_mae_one_step`` / ``reward_mae_open_loop``: mean absolute reward error.
- ``spearman_var_vs_score_error``: Spearman correlation between the predicted score variance and the actual score error
  ``|success_prob - next.success|`` over every open-loop step; ``spearman_var_vs_frame_error`` uses the frame MSE.

Writes ``summary.json`` and mp4 videos (real | imagined | |difference|, upscaled) in the Hydra run dir.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import hydra
import numpy as np
import torch
import torch.nn.functional as F
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from scipy.stats import rankdata, spearmanr

import world_models
from vla_wmrl.config import SimConfig, to_dataclass, write_summary
from vla_wmrl.train_world_model import EpisodeData, check_dataset_matches, load_episodes, psnr

log = logging.getLogger(__name__)


@dataclass
class EvalWorldModelConfig:
    """Evaluation options."""

    checkpoint: str = ""           # world-model checkpoint directory (config.json + model.safetensors)
    dataset: list[str] = field(default_factory=list)  # held-out LeRobotDataset root(s)
    ks: list[int] = field(default_factory=lambda: [1, 5, 15])  # open-loop horizons scored
    stride: int = 3                # open-loop rollouts start every `stride` frames
    max_episodes: int = 0          # score only the first N held-out episodes (0 = all; for slow models on CPUs)
    batch_size: int = 256          # rollouts run together
    videos: int = 4                # episodes written as mp4
    video_scale: int = 4           # nearest-neighbour upscaling of the 64 px frames in the videos
    seed: int = 0                  # seed of the sampling noise (stochastic models)
    num_threads: int = 2           # torch CPU threads
    device: str = "cpu"


# ---------------------------------------------------------------------------------------------------------------- #
# Metrics (small, documented implementations: torchmetrics/sklearn are not dependencies)
# ---------------------------------------------------------------------------------------------------------------- #
def ssim(pred: torch.Tensor, target: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Structural similarity (Wang et al. 2004) per image, for pixels in [0, 1]: (N, C, H, W) -> (N,).

    Gaussian-weighted local means, variances and covariance (11x11 window, sigma 1.5, 'valid' borders), constants
    C1 = 0.01^2 and C2 = 0.03^2, averaged over pixels and channels (the standard settings).
    """
    c = pred.shape[1]
    g = torch.exp(-((torch.arange(window) - window // 2) ** 2) / (2 * sigma ** 2))
    g = (g / g.sum()).to(pred)
    kernel = (g[:, None] * g[None, :]).expand(c, 1, window, window)
    blur = lambda x: F.conv2d(x, kernel, groups=c)  # noqa: E731
    mu_x, mu_y = blur(pred), blur(target)
    sxx = blur(pred * pred) - mu_x ** 2
    syy = blur(target * target) - mu_y ** 2
    sxy = blur(pred * target) - mu_x * mu_y
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (sxx + syy + c2))
    return s.mean(dim=(1, 2, 3))


def auroc(scores, labels) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic (ties count half); NaN with one class only."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    n_pos, n_neg = labels.sum(), (~labels).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def spearman(x, y) -> float:
    """Spearman rank correlation (scipy), NaN when either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)


# ---------------------------------------------------------------------------------------------------------------- #
# Rollouts
# ---------------------------------------------------------------------------------------------------------------- #
def _context(data: EpisodeData, index: torch.Tensor, context: int):
    """Real context frames (B, T, C, H, W) in [0, 1] and states (B, T, D) ending at frames ``index``."""
    start = data.ep_start[index][:, None]
    idx = (index[:, None] + torch.arange(-context + 1, 1)[None]).clamp(min=start)
    return data.frames[idx].float() / 255.0, data.states[idx]


@torch.inference_mode()
def open_loop(model, data: EpisodeData, starts: torch.Tensor, steps: int, batch_size: int, gen) -> dict:
    """Roll out ``steps`` real actions from real contexts at ``starts``; per (start, k) arrays of errors and scores."""
    T = model.cfg.context
    out = {k: [] for k in ("psnr", "psnr_copy", "ssim", "ssim_copy", "frame_mse", "frame_valid", "prob", "var",
                           "reward", "true_success", "true_reward", "step_valid")}
    for b in range(0, len(starts), batch_size):
        idx = starts[b:b + batch_size]
        end = data.ep_end[idx][:, None]
        frames, states = _context(data, idx, T)
        step_idx = idx[:, None] + torch.arange(steps)[None]  # (B, K) the action index of step k
        step_valid = step_idx < end
        frame_idx = step_idx + 1
        frame_valid = frame_idx < end
        pred = model.predict(frames, states, data.actions[step_idx.clamp(max=end - 1)], generator=gen)
        real = data.frames[frame_idx.clamp(max=end - 1)].float() / 255.0  # (B, K, C, H, W)
        copy = frames[:, -1:].expand_as(real)
        flat = lambda x: x.flatten(0, 1)  # noqa: E731
        out["psnr"].append(psnr(pred.frames, real))
        out["psnr_copy"].append(psnr(copy, real))
        out["ssim"].append(ssim(flat(pred.frames), flat(real)).view(real.shape[:2]))
        out["ssim_copy"].append(ssim(flat(copy), flat(real)).view(real.shape[:2]))
        out["frame_mse"].append(((pred.frames - real) ** 2).mean(dim=(2, 3, 4)))
        out["frame_valid"].append(frame_valid)
        out["step_valid"].append(step_valid)
        out["prob"].append(pred.success_prob)
        out["var"].append(pred.score_var)
        out["reward"].append(pred.reward)
        out["true_success"].append(data.success[step_idx.clamp(max=end - 1)])
        out["true_reward"].append(data.reward[step_idx.clamp(max=end - 1)])
    return {k: torch.cat(v).numpy() for k, v in out.items()}


@torch.inference_mode()
def whole_episodes(model, data: EpisodeData, gen, batch_size: int) -> list[dict]:
    """Imagine every episode from its first frame with its whole real action sequence."""
    T, results = model.cfg.context, []
    eps = data.episodes
    for b in range(0, len(eps), batch_size):
        group = eps[b:b + batch_size]
        L = max(e - s for s, e in group)
        idx = torch.tensor([s for s, _ in group])
        ends = torch.tensor([e for _, e in group])[:, None]
        frames, states = _context(data, idx, T)
        act_idx = (idx[:, None] + torch.arange(L)[None]).clamp(max=ends - 1)
        pred = model.predict(frames, states, data.actions[act_idx], generator=gen)
        for i, (s, e) in enumerate(group):
            n = e - s
            results.append({"start": s, "length": n, "real_success": bool(data.success[e - 1] > 0.5),
                            "prob": pred.success_prob[i, :n].numpy(), "var": pred.score_var[i, :n].numpy(),
                            "frames": pred.frames[i, :n]})
    return results


def write_video(path: Path, real: torch.Tensor, imagined: torch.Tensor, scale: int, fps: int = 20) -> None:
    """mp4 of real | imagined | |difference| side by side. real, imagined: (L, C, H, W) in [0, 1], first camera."""
    import imageio.v2 as imageio

    diff = (real - imagined).abs().clamp(0, 1) * 3  # amplified so small errors show
    strip = torch.cat([real, imagined, diff.clamp(0, 1)], dim=3)[:, :3]  # (L, 3, H, 3W)
    strip = F.interpolate(strip, scale_factor=scale, mode="nearest")
    frames = (strip.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimwrite(str(path), list(frames), fps=fps, macro_block_size=1)


# ---------------------------------------------------------------------------------------------------------------- #
def evaluate(cfg: EvalWorldModelConfig, sim: SimConfig, run_dir: str | Path) -> dict:
    """Score ``cfg.checkpoint`` on ``cfg.dataset``; write summary.json and videos to ``run_dir``; return the summary.

    Raises:
        ValueError: the dataset or the sim config does not match the world model (both sides named).
    """
    torch.set_num_threads(cfg.num_threads)
    run_dir, t0 = Path(run_dir), time.perf_counter()
    model = world_models.load_world_model(cfg.checkpoint, map_location=cfg.device)
    mc = model.cfg
    if sim.image_size != mc.image_size:
        raise ValueError(f"sim {sim.name} renders {sim.image_size}x{sim.image_size} images but the world model "
                         f"was trained on {mc.image_size}x{mc.image_size}")
    roots = [cfg.dataset] if isinstance(cfg.dataset, str) else list(cfg.dataset)
    for root in roots:
        check_dataset_matches(root, mc.image_keys, mc.image_size, mc.state_dim, mc.action_dim, what="world model")
    data = load_episodes(roots, mc.image_keys)
    if 0 < cfg.max_episodes < len(data.episodes):
        data = data.subset(range(cfg.max_episodes))
    gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed)
    K = max(cfg.ks)

    # One step from every frame (success/reward one step ahead), then K-step rollouts from every `stride`-th frame.
    one = open_loop(model, data, torch.arange(len(data)), 1, cfg.batch_size, gen)
    sv = one["step_valid"][:, 0]
    starts = torch.arange(0, len(data), cfg.stride)
    ol = open_loop(model, data, starts, K, cfg.batch_size, gen)
    open_loop_table = {}
    for k in cfg.ks:
        m = ol["frame_valid"][:, k - 1]
        open_loop_table[f"k={k}"] = {
            name: float(ol[key][:, k - 1][m].mean()) for name, key in
            (("psnr", "psnr"), ("psnr_copy_last", "psnr_copy"), ("ssim", "ssim"), ("ssim_copy_last", "ssim_copy"))}
        open_loop_table[f"k={k}"]["n"] = int(m.sum())
    valid = ol["step_valid"]
    score_err = np.abs(ol["prob"] - ol["true_success"])[valid]
    fv = ol["frame_valid"]

    episodes = whole_episodes(model, data, gen, cfg.batch_size)
    real_outcome = [e["real_success"] for e in episodes]
    summary = {
        "checkpoint": str(cfg.checkpoint), "world_model": mc.name, "datasets": roots, "episodes": len(episodes),
        "frames": len(data), "real_success_rate": float(np.mean(real_outcome)),
        "open_loop": open_loop_table,
        "success_auroc_one_step": auroc(one["prob"][:, 0][sv], one["true_success"][:, 0][sv]),
        "success_auroc_episode_end": auroc([e["prob"][-1] for e in episodes], real_outcome),
        "success_auroc_episode_any": auroc([e["prob"].max() for e in episodes], real_outcome),
        "imagined_success_rate": float(np.mean([e["prob"].max() > mc.success_threshold for e in episodes])),
        "reward_mae_one_step": float(np.abs(one["reward"] - one["true_reward"])[:, 0][sv].mean()),
        "reward_mae_open_loop": float(np.abs(ol["reward"] - ol["true_reward"])[valid].mean()),
        "spearman_var_vs_score_error": spearman(ol["var"][valid], score_err),
        "spearman_var_vs_frame_error": spearman(ol["var"][fv], ol["frame_mse"][fv]),
        "mean_score_var": float(ol["var"][valid].mean()),
        "variance": mc.variance,
    }
    for i, ep in enumerate(episodes[:cfg.videos]):
        s, n = ep["start"], ep["length"]
        # Frame 0 is the real start frame on both sides; the frame after the last action was never recorded.
        real = data.frames[s:s + n].float() / 255.0
        imagined = torch.cat([real[:1], ep["frames"][:n - 1]])
        write_video(run_dir / "videos" / f"episode_{i:03d}.mp4", real, imagined, cfg.video_scale)
    summary["videos"] = str(run_dir / "videos")
    summary["seconds"] = time.perf_counter() - t0
    summary["eval_config"] = asdict(cfg)
    write_summary(run_dir, summary)
    return summary


def format_table(summary: dict) -> str:
    """The open-loop table and the scalar figures as plain text."""
    lines = [f"{'k':>4} {'PSNR':>7} {'copy':>7} {'SSIM':>6} {'copy':>6}"]
    for k, row in summary["open_loop"].items():
        lines.append(f"{k[2:]:>4} {row['psnr']:>7.2f} {row['psnr_copy_last']:>7.2f} {row['ssim']:>6.3f} "
                     f"{row['ssim_copy_last']:>6.3f}")
    for key in ("success_auroc_one_step", "success_auroc_episode_end", "success_auroc_episode_any",
                "reward_mae_one_step", "reward_mae_open_loop", "spearman_var_vs_score_error",
                "spearman_var_vs_frame_error"):
        lines.append(f"{key}: {summary[key]:.3f}")
    return "\n".join(lines)


@hydra.main(config_path="../configs", config_name="eval_world_model", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    sim = to_dataclass(SimConfig, cfg.sim)
    keys = OmegaConf.to_container(cfg, resolve=True)
    keys.pop("sim")
    if isinstance(keys.get("dataset"), str):
        keys["dataset"] = [keys["dataset"]]
    eval_cfg = to_dataclass(EvalWorldModelConfig, OmegaConf.create(keys))
    summary = evaluate(eval_cfg, sim, HydraConfig.get().runtime.output_dir)
    log.info("\n%s\n-> %s", format_table(summary), HydraConfig.get().runtime.output_dir)
    return summary


if __name__ == "__main__":
    main()
