"""Evaluate a saved policy in the real simulator: success rate over N seeded episodes, summary.json, mp4 videos.

Usage::

    python -m vla_wmrl.eval sim=robosuite_lift policy_path=outputs/sft/lift/pretrained_model episodes=50 num_envs=2
    python -m vla_wmrl.eval sim=mujoco_reach policy_path=... +env_kwargs.colour=red task="reach the blue target"

Episode ``k`` is reset with seed ``seed + k``; the default seed (100000) is disjoint from the seeds datasets are
collected with (0.. and 1000..), so the policy never meets a training start state.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
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
class EvalConfig:
    """Evaluation settings (the top level of ``configs/eval.yaml`` minus ``sim``)."""

    policy_path: str = "???"       # directory written by save_pretrained (e.g. <sft run>/pretrained_model)
    episodes: int = 50             # seeded episodes
    num_envs: int = 2              # simulator worker processes
    seed: int = 100000             # episode k is reset with seed + k (disjoint from the datasets' seeds)
    deterministic: bool = True     # central action (tanh of the mean) instead of sampling
    videos: int = 4                # episodes (the first seeds) written as mp4
    task: str | None = None        # replace the env's instruction by this one (probes whether language matters)
    threads: int = 1               # torch CPU threads
    device: str = "cpu"
    env_kwargs: dict = field(default_factory=dict)  # extra sims.make_env keywords, e.g. {colour: red}


def write_video(path: Path, frames: list[np.ndarray], fps: int, scale: int = 4) -> Path:
    """Write (H, W, 3) uint8 frames as an mp4, enlarged ``scale`` times (nearest neighbour) so 64-px images are
    watchable."""
    import imageio.v2 as imageio

    big = [np.repeat(np.repeat(f, scale, axis=0), scale, axis=1) for f in frames]
    imageio.mimwrite(path, big, fps=fps, macro_block_size=1)
    return path


def evaluate(policy, sim: SimConfig, episodes: int, num_envs: int = 2, seed: int = 100000,
             deterministic: bool = True, videos: int = 0, video_dir: str | Path | None = None,
             task: str | None = None, env_kwargs: dict | None = None, asynchronous: bool = True,
             progress: bool = True, envs=None, max_steps: int | None = None) -> dict:
    """Run ``episodes`` seeded episodes of ``policy`` and return the summary figures.

    ``envs``: an open vector env of this sim to run in (kept open) instead of starting new worker processes.
    ``max_steps``: episodes end after this many steps (None: the environment's horizon, the task's by default).
    ``asynchronous=False`` needs ``num_envs=1``: ``run_episodes`` keeps stepping a worker whose episode ended while
    others run, which gymnasium's SyncVectorEnv (autoreset disabled) rejects; the async env tolerates it.

    Raises:
        ValueError: the policy does not fit the sim (action dimension, observation keys or shapes).
    """
    import sims
    from vla_wmrl.policies import RolloutAdapter, check_env_compat
    from vla_wmrl.rollout import run_episodes

    num_envs = max(1, min(num_envs, episodes))
    if not asynchronous and num_envs > 1:
        raise ValueError("asynchronous=False needs num_envs=1 (see the docstring)")
    kwargs = {**sim.env_kwargs(), **(env_kwargs or {})}
    own_envs = envs is None
    if own_envs:
        envs = sims.make_vector_env(sim.name, num_envs, asynchronous=asynchronous and num_envs > 1, **kwargs)
    results, written, t0 = [], [], time.perf_counter()
    try:
        check_env_compat(policy.config, envs.single_observation_space, envs.single_action_space,
                         source=f"policy ({policy.config.type})")
        camera = sorted(policy.config.image_features)[0]
        adapter = RolloutAdapter(policy, deterministic=deterministic, task_override=task)
        seeds = [seed + k for k in range(episodes)]
        with tqdm(total=episodes, desc=f"eval {sim.name}", unit="ep", disable=not progress) as bar:
            for ep in run_episodes(envs, adapter, seeds, max_steps=max_steps):
                results.append({"seed": ep.seed, "success": ep.success, "length": ep.length, "return": ep.ret,
                                "unstable": ep.unstable, "task": ep.frames[0]["task"]})
                if video_dir is not None and ep.seed - seed < videos:
                    name = f"seed{ep.seed}_{'success' if ep.success else 'failure'}.mp4"
                    Path(video_dir).mkdir(parents=True, exist_ok=True)
                    frames = [f[camera] for f in ep.frames]
                    written.append(str(write_video(Path(video_dir) / name, frames, sim.fps)))
                bar.update(1)
                bar.set_postfix(success=f"{np.mean([r['success'] for r in results]):.2f}")
    finally:
        if own_envs:
            envs.close()
    results.sort(key=lambda r: r["seed"])
    success = np.array([r["success"] for r in results], dtype=float)
    return {"sim": sim.name, "episodes": episodes, "success_rate": float(success.mean()),
            "successes": int(success.sum()),
            "success_rate_stderr": float(success.std(ddof=1) / np.sqrt(len(success))) if len(success) > 1 else 0.0,
            "mean_length": float(np.mean([r["length"] for r in results])),
            "mean_return": float(np.mean([r["return"] for r in results])),
            "unstable_episodes": int(sum(r["unstable"] for r in results)), "seeds": [seed, seed + episodes - 1],
            "deterministic": deterministic, "task_override": task, "env_kwargs": env_kwargs or {},
            "seconds": time.perf_counter() - t0, "videos": written, "per_episode": results}


@hydra.main(config_path="../configs", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from vla_wmrl.policies import load_policy

    sim = to_dataclass(SimConfig, cfg.sim)
    ev = to_dataclass(EvalConfig, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "sim"]))
    torch.set_num_threads(ev.threads)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    policy = load_policy(ev.policy_path, device=ev.device)
    summary = evaluate(policy, sim, ev.episodes, ev.num_envs, ev.seed, ev.deterministic, ev.videos,
                       run_dir / "videos", ev.task, ev.env_kwargs)
    summary["policy_path"] = str(ev.policy_path)
    path = write_summary(run_dir, summary)
    log.info("success rate %.3f (%d/%d) on %s; summary %s", summary["success_rate"], summary["successes"],
             ev.episodes, sim.name, path)
    return summary


if __name__ == "__main__":
    main()
