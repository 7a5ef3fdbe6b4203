"""Record episodes of a policy in a simulator as a LeRobotDataset.

Usage::

    python -m vla_wmrl.collect sim=robosuite_lift policy=expert episodes=50
    python -m vla_wmrl.collect sim=robosuite_lift policy=expert policy.noise=0.3 episodes=100 video=false
    python -m vla_wmrl.collect sim=robosuite_lift policy_path=outputs/sft/lift10/pretrained_model \
        explore_std=0.1 episodes=100 root=data/robosuite_lift/bc_lift10_100      # a trained policy's own rollouts

A trained policy's rollouts (sampled with its exploration noise) are the on-policy data a world model needs to imagine
that policy faithfully (``pipeline.policy_episodes`` in ``vla_wmrl.train`` adds them to the world model's data).
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
            num_envs: int = 2, video: bool = True, overwrite: bool = False, video_crf: int | None = None,
            policy_path: str | None = None, explore_std: float | None = None) -> dict:
    """Record ``episodes`` seeded episodes into a LeRobotDataset at ``root``; return summary figures.

    The scripted ``expert`` acts, unless ``policy_path`` names a saved policy: it then acts by sampling (its
    exploration std reset to ``explore_std`` when given, as ``wmrl.explore_std`` does before RL).

    Raises:
        ValueError: the saved policy does not fit the sim, or ``explore_std`` is not positive.
    """
    num_envs = max(1, min(num_envs, episodes))
    envs = sims.make_vector_env(sim.name, num_envs, asynchronous=num_envs > 1, **sim.env_kwargs())
    try:
        features = dataset_features(envs.single_observation_space, envs.single_action_space, video=video)
        if policy_path:
            import torch

            from vla_wmrl.policies import RolloutAdapter, load_policy, set_exploration_std

            torch.manual_seed(seed)  # the sampled actions are reproducible
            trained = load_policy(policy_path, envs, device="cpu")  # raises when it does not fit the sim
            if explore_std is not None:
                set_exploration_std(trained, explore_std)
            policy, name = RolloutAdapter(trained), f"policy:{policy_path}"
        else:
            policy, name = ExpertPolicy(sim.name, num_envs, expert.noise, expert.noisy_fraction, seed=seed), expert.name
        dataset = create_dataset(root, repo_id, sim.fps, features, overwrite=overwrite, video_crf=video_crf)
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
    return {"sim": sim.name, "policy": name, "explore_std": explore_std, "episodes": episodes,
            "success_rate": float(np.mean(successes)),
            "mean_length": float(np.mean(lengths)), "frames": int(np.sum(lengths)), "unstable_episodes": unstable,
            "seconds": elapsed, "frames_per_second": float(np.sum(lengths) / elapsed), "dataset": str(root),
            "video": video}


@hydra.main(config_path="../configs", config_name="collect", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    sim = to_dataclass(SimConfig, cfg.sim)
    expert = to_dataclass(ExpertConfig, cfg.policy)
    summary = collect(sim, expert, cfg.episodes, cfg.root, cfg.repo_id, cfg.seed, cfg.num_envs, cfg.video,
                      cfg.overwrite, cfg.video_crf, cfg.policy_path, cfg.explore_std)
    path = write_summary(HydraConfig.get().runtime.output_dir, summary)
    log.info("success rate %.3f over %d episodes -> %s (summary %s)", summary["success_rate"], cfg.episodes,
             cfg.root, path)
    return summary


if __name__ == "__main__":
    main()
