"""Recording round-trips through LeRobot's own LeRobotDataset; `collect` is a Hydra app that writes summary.json."""

import json

import numpy as np
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

import sims
from vla_wmrl.data import load_dataset


def test_dataset_loads_with_lerobot_and_matches_the_simulator(reach_dataset):
    ds = LeRobotDataset("local/reach_test", root=reach_dataset)
    assert ds.meta.total_episodes == 12
    assert {"observation.images.top", "observation.state", "action", "next.reward", "next.success",
            "next.done"} <= set(ds.features)
    item = ds[0]
    assert item["observation.images.top"].shape == (3, 64, 64)
    assert item["task"] in ("reach the red target", "reach the blue target")
    # episode 0 was reset with seed 0: its first recorded frame is what the simulator shows after reset(seed=0)
    env = sims.make_env("mujoco_reach")
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(item["observation.state"].numpy(), obs["observation.state"], atol=1e-6)
    decoded = (item["observation.images.top"].permute(1, 2, 0).numpy() * 255).astype(np.float32)
    err = np.abs(decoded - obs["observation.images.top"].astype(np.float32)).mean()
    assert err < 6.0, f"video codec error {err:.2f} / 255 per pixel"
    assert item["task"] == obs["task"]
    env.close()
    # each episode ends with done; a success flag is set exactly where the episode succeeded
    ends = ds.meta.episodes["dataset_to_index"]
    last = ds[int(ends[0]) - 1]
    assert bool(last["next.done"])


def test_dataloader_returns_sequences_through_delta_timestamps(reach_dataset):
    fps = 20
    ds = load_dataset(reach_dataset, delta_timestamps={"observation.images.top": [-1 / fps, 0.0],
                                                       "action": [0.0, 1 / fps, 2 / fps]})
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True)))
    assert batch["observation.images.top"].shape == (4, 2, 3, 64, 64)
    assert batch["action"].shape == (4, 3, 2)
    assert batch["action_is_pad"].shape == (4, 3)


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no LeRobotDataset"):
        load_dataset(tmp_path / "nothing")


def test_collect_cli_writes_dataset_and_summary(tmp_path):
    from hydra import compose, initialize

    from vla_wmrl import collect as collect_mod

    with initialize(config_path="../configs", version_base="1.3"):
        cfg = compose("collect", overrides=["sim=mujoco_reach", "episodes=2", "num_envs=1", "video=false",
                                            f"root={tmp_path / 'ds'}"])
    summary = collect_mod.collect(collect_mod.to_dataclass(collect_mod.SimConfig, cfg.sim),
                                  collect_mod.to_dataclass(collect_mod.ExpertConfig, cfg.policy), cfg.episodes,
                                  cfg.root, cfg.repo_id, cfg.seed, cfg.num_envs, cfg.video)
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 2
    ds = load_dataset(tmp_path / "ds")
    assert ds.meta.features["observation.images.top"]["dtype"] == "image"  # lossless
    with pytest.raises(FileExistsError):
        collect_mod.collect(collect_mod.SimConfig(name="mujoco_reach", cameras=["top"]), collect_mod.ExpertConfig(),
                            1, str(tmp_path / "ds"), "local/x", num_envs=1)


def test_unknown_config_key_is_rejected():
    from omegaconf import OmegaConf

    from vla_wmrl.config import SimConfig, to_dataclass

    with pytest.raises(ValueError, match="valid keys"):
        to_dataclass(SimConfig, OmegaConf.create({"name": "mujoco_reach", "imagesize": 64}))
