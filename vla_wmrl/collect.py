"""Record episodes of a policy in a simulator as a LeRobotDataset.

Usage::

    python -m vla_wmrl.collect sim=robosuite_lift policy=expert episodes=50
    python -m vla_wmrl.collect sim=robosuite_lift policy=expert policy.noise=0.3 episodes=100 video=false
"""

from __future__ import annotations

import logging
import time

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from tqdm import tqdm

import sims
from vla_wmrl.config import ExpertConfig, SimConfig, to_dataclass, write_summary
from vla_wmrl.data import create_dataset, dataset_features, write_episode
from vla_wmrl.rollout import ExpertPolicy, run_episodes

log = logging.getLogger(__name__)


def collect(sim: SimConfig, expert: ExpertConfig, episodes: int, root: str, repo_id: str, seed: int = 0,
            num_envs: int = 2, video: bool = True, overwrite: bool = False, video_crf: int | None = None) -> dict:
    """Record ``episodes`` seeded expert episodes into a LeRobotDataset at ``root``; return summary figures."""
    num_envs = max(1, min(num_envs, episodes))
    envs = sims.make_vector_env(sim.name, num_envs, asynchronous=num_envs > 1, **sim.env_kwargs())
    try:
        features = dataset_features(envs.single_observation_space, envs.single_action_space, video=video)
        dataset = create_dataset(root, repo_id, sim.fps, features, overwrite=overwrite, video_crf=video_crf)
        policy = ExpertPolicy(sim.name, num_envs, expert.noise, expert.noisy_fraction, seed=seed)
        successes, lengths, unstable, t0 = [], [], 0, time.perf_counter()
        with tqdm(total=episodes, desc=f"collect {sim.name}", unit="ep") as bar:
            for ep in run_episodes(envs, policy, [seed + k for k in range(episodes)]):
                write_episode(dataset, ep)
                successes.append(ep.success)
                lengths.append(ep.length)
                unstable += ep.unstable
                bar.update(1)
                bar.set_postfix(success=f"{np.mean(successes):.2f}")
        dataset.finalize()
        elapsed = time.perf_counter() - t0
    finally:
        envs.close()
    return {"sim": sim.name, "policy": expert.name, "episodes": episodes, "success_rate": float(np.mean(successes)),
            "mean_length": float(np.mean(lengths)), "frames": int(np.sum(lengths)), "unstable_episodes": unstable,
            "seconds": elapsed, "frames_per_second": float(np.sum(lengths) / elapsed), "dataset": str(root),
            "video": video}


@hydra.main(config_path="../configs", config_name="collect", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    sim = to_dataclass(SimConfig, cfg.sim)
    expert = to_dataclass(ExpertConfig, cfg.policy)
    summary = collect(sim, expert, cfg.episodes, cfg.root, cfg.repo_id, cfg.seed, cfg.num_envs, cfg.video,
                      cfg.overwrite, cfg.video_crf)
    path = write_summary(HydraConfig.get().runtime.output_dir, summary)
    log.info("success rate %.3f over %d episodes -> %s (summary %s)", summary["success_rate"], cfg.episodes,
             cfg.root, path)
    return summary


if __name__ == "__main__":
    main()
