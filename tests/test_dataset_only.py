"""Training from a LeRobotDataset alone (`sim=none dataset=...`), with anchor and evaluation episodes on a robot.

The robot is `vla_wmrl_sim`: a real LeRobot `Robot` subclass driving MuJoCo, so the whole robot path runs here.
The dataset is an ordinary recorded LeRobotDataset; no simulator is made by the trainer.
"""

import json

import numpy as np
import pytest
from hydra import compose, initialize

from vla_wmrl import train


def _cfg(tmp_path, dataset, *overrides):
    with initialize(config_path="../configs", version_base="1.3"):
        return compose("train", overrides=[
            "sim=none", f"dataset={dataset}", "+experiment=debug", f"cache_dir={tmp_path / 'cache'}",
            "wmrl.updates=2", "wmrl.eval_episodes=2", "wmrl.horizon=15", *overrides])


@pytest.fixture(scope="module")
def robot_run(reach_dataset, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dataset_only")
    cfg = _cfg(tmp, reach_dataset, "robot=vla_wmrl_sim", f"robot.calibration_dir={tmp / 'calibration'}",
               "robot_run.realtime=false", "correction.anchor_fraction=0.5")
    return tmp, train.run(cfg, tmp / "run")


def test_train_from_a_dataset_with_anchor_episodes_on_a_robot(robot_run, reach_dataset):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from vla_wmrl.dataset_spec import dataset_spec
    from vla_wmrl.policies import load_policy

    tmp, summary = robot_run
    assert summary["sim"] is None and summary["robot"] == "vla_wmrl_sim" and summary["updates"] == 2
    assert summary["real_env_steps"] > 0  # anchor groups ran on the robot
    assert 0.0 <= summary["final_success_rate"] <= 1.0
    # Only the dataset-driven stages ran: nothing was collected in a simulator.
    assert sorted(p.name.split("-")[0] for p in (tmp / "cache").iterdir()) == ["sft", "world_model"]
    # Every robot episode (anchors, evaluations) was recorded into a LeRobotDataset that LeRobot loads.
    rec = tmp / "run" / "robot_episodes"
    ds = LeRobotDataset("local/robot_episodes", root=rec)
    evals = 2 * len(summary["history"])
    anchors = ds.meta.total_episodes - evals
    assert anchors > 0 and anchors % 4 == 0  # whole groups of group_size 4
    assert set(ds.meta.features) >= {"observation.state", "action", "next.success"}
    # The policy acts in the dataset's recorded action range (a real arm's units), not a simulator's box.
    spec = dataset_spec(reach_dataset)
    policy = load_policy(tmp / "run" / "policy")
    assert np.allclose(policy.config.action_low, spec.action_min, atol=1e-5)
    assert np.allclose(policy.config.action_high, spec.action_max, atol=1e-5)
    assert json.loads((tmp / "run" / "summary.json").read_text())["dataset"] == str(reach_dataset)


def test_world_model_only_needs_no_robot_and_real_modes_say_what_is_missing(robot_run, reach_dataset, tmp_path):
    tmp, _ = robot_run
    summary = train.run(_cfg(tmp, reach_dataset, "wmrl.mode=wm", "wmrl.updates=1"), tmp_path / "wm")
    assert summary["mode"] == "wm" and summary["real_env_steps"] == 0 and summary["robot"] is None
    with pytest.raises(ValueError, match="has no robot.*robot=<type>.*wmrl.mode=wm"):
        train.run(_cfg(tmp, reach_dataset), tmp_path / "wmrl")
    with pytest.raises(ValueError, match="needs dataset="):
        with initialize(config_path="../configs", version_base="1.3"):
            cfg = compose("train", overrides=["sim=none", "+experiment=debug"])
        train.run(cfg, tmp_path / "none")


def test_policy_action_range_maps_and_log_probs_stay_consistent():
    """A policy with a real arm's action range samples inside it, and log-probabilities change only by the
    constant Jacobian of the affine map (GRPO ratios are unchanged)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature

    from vla_wmrl.policies import make_policy, make_policy_config

    def policy(**kw):
        cfg = make_policy_config("tiny_vla", conv_channels=[8], image_embed_dim=8, text_hidden_dim=8, hidden_dim=16,
                                 **kw)
        cfg.input_features = {"observation.images.top": PolicyFeature(FeatureType.VISUAL, (3, 16, 16)),
                              "observation.state": PolicyFeature(FeatureType.STATE, (2,))}
        cfg.output_features = {"action": PolicyFeature(FeatureType.ACTION, (2,))}
        torch.manual_seed(0)
        return make_policy(cfg)

    low, high = [-100.0, 0.0], [100.0, 50.0]
    unit, arm = policy(), policy(action_low=low, action_high=high)
    batch = {"observation.images.top": torch.rand(64, 3, 16, 16), "observation.state": torch.randn(64, 2),
             "task": ["pick"] * 64}
    a = arm.select_action(batch)
    assert (a >= torch.tensor(low)).all() and (a <= torch.tensor(high)).all() and a[:, 0].abs().max() > 1.5
    x = unit.select_action(batch, deterministic=True)
    center, half = torch.tensor([0.0, 25.0]), torch.tensor([100.0, 25.0])
    assert torch.allclose(arm.select_action(batch, deterministic=True), center + half * x, atol=1e-4)
    lp_unit, lp_arm = unit.log_prob(batch, x * 0.9), arm.log_prob(batch, center + half * x * 0.9)
    assert torch.allclose(lp_arm, lp_unit - half.log().sum(), atol=1e-3)
    with pytest.raises(ValueError, match="action_low"):
        make_policy_config("tiny_vla", action_low=[0.0])


def test_resized_dataset_drives_a_robot_with_larger_camera_frames(reach_dataset, tmp_path):
    """A robot's dataset is resized once (`vla_wmrl.resize_dataset`); on the robot, live camera frames are resized
    the same way, so the policy sees what it was trained on, and the episodes are recorded at the dataset's size."""
    from hydra import initialize_config_dir

    from vla_wmrl.data import load_dataset, resize_images
    from vla_wmrl.dataset_spec import dataset_spec
    from vla_wmrl.eval_robot import run
    from vla_wmrl.resize_dataset import resize_dataset

    small = resize_dataset(reach_dataset, tmp_path / "reach32", image_size=32)
    src, dst = dataset_spec(reach_dataset), dataset_spec(tmp_path / "reach32")
    assert dst.image_shapes == {"top": (32, 32, 3)} and small["frames"] == src.num_frames
    assert (dst.num_episodes, dst.state_dim, dst.action_dim, dst.instructions) == \
        (src.num_episodes, src.state_dim, src.action_dim, src.instructions)
    a, b = load_dataset(reach_dataset)[5], load_dataset(tmp_path / "reach32")[5]
    assert np.allclose(a["observation.state"], b["observation.state"]) and a["task"] == b["task"]
    expected = resize_images((a["observation.images.top"].permute(1, 2, 0) * 255).round().byte().numpy(), 32)
    got = (b["observation.images.top"].permute(1, 2, 0) * 255).round().numpy()
    assert np.abs(got - expected.astype(float)).mean() < 8  # only the video codec's error

    from pathlib import Path
    configs = str(Path(__file__).resolve().parents[1] / "configs")
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        cfg = lambda *o: compose("eval_robot", overrides=[  # noqa: E731
            "robot=vla_wmrl_sim", f"robot.calibration_dir={tmp_path / 'cal'}", "policy_path=expert",
            f"dataset={tmp_path / 'reach32'}", "episodes=2", "realtime=false", "episode_time_s=3", *o])
        with pytest.raises(ValueError, match=r"\(64, 64, 3\).*\(32, 32, 3\).*resize_images"):
            run(cfg(f"root={tmp_path / 'rec_bad'}"), tmp_path / "bad")
        summary = run(cfg(f"root={tmp_path / 'rec'}", "resize_images=squash"), tmp_path / "ok")
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0
    assert dataset_spec(tmp_path / "rec").image_shapes == {"top": (32, 32, 3)}


def test_resize_images_squash_and_crop():
    from vla_wmrl.data import resize_images

    img = np.zeros((48, 64, 3), np.uint8)
    img[:, 8:56] = 200  # the central 48x48 square is bright, the side bands dark
    assert resize_images(img, 16).shape == (16, 16, 3)
    assert resize_images(img, 16, "crop").min() == 200  # crop keeps only the central square
    assert resize_images(img, 16, "squash")[:, 0].max() < 100  # squash keeps the dark bands at the sides
    assert resize_images(np.stack([img, img]), 16).shape == (2, 16, 16, 3)
    with pytest.raises(ValueError, match="valid"):
        resize_images(img, 16, "stretch")


def test_a_lerobot_record_dataset_without_success_labels_trains_the_world_model(reach_dataset, tmp_path):
    """`lerobot-record` datasets have no next.* columns: their episodes count as successful demonstrations."""
    from vla_wmrl.data import create_dataset, load_dataset
    from vla_wmrl.dataset_spec import dataset_spec
    from vla_wmrl.train_world_model import load_episodes

    spec = dataset_spec(reach_dataset)
    features = {k: v for k, v in spec.features().items() if not k.startswith("next.")}
    out = create_dataset(tmp_path / "recorded", "local/recorded", spec.fps, features)
    src, lengths = load_dataset(reach_dataset), []
    for ep in range(3):
        lo, hi = (int(src.meta.episodes[k][ep]) for k in ("dataset_from_index", "dataset_to_index"))
        for i in range(lo, hi):
            item = src[i]
            out.add_frame({"observation.images.top": (item["observation.images.top"].permute(1, 2, 0) * 255)
                           .round().byte().numpy(), "observation.state": item["observation.state"].numpy(),
                           "action": item["action"].numpy(), "task": item["task"]})
        out.save_episode()
        lengths.append(hi - lo)
    out.finalize()
    data = load_episodes([tmp_path / "recorded"], spec.image_keys)
    assert [e - s for s, e in data.episodes] == lengths
    assert data.success.sum() == 3 and all(data.success[e - 1] == 1 for _, e in data.episodes)
