import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session")
def reach_dataset(tmp_path_factory):
    """A small real LeRobotDataset: 12 `mujoco_reach` episodes (mp4 video), half of them with a noisy expert so it
    holds successes and failures. Returns the dataset root (pathlib.Path)."""
    from vla_wmrl.collect import collect
    from vla_wmrl.config import ExpertConfig, SimConfig

    root = tmp_path_factory.mktemp("data") / "reach"
    sim = SimConfig(name="mujoco_reach", cameras=["top"], horizon=50)
    summary = collect(sim, ExpertConfig(noise=1.0, noisy_fraction=0.5), episodes=12, root=str(root),
                      repo_id="local/reach_test", seed=0, num_envs=2, video=True)
    assert 0.0 < summary["success_rate"] <= 1.0
    return root
