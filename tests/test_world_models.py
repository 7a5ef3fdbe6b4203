"""World models: the contract every registered model keeps, the imagined env, training, checkpoints and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import world_models
from world_models import WORLD_MODELS, ImaginedVectorEnv, load_world_model, make_world_model

IMAGE_KEY = "observation.images.top"
SHAPES = {"image_keys": [IMAGE_KEY], "image_size": 32, "state_dim": 6, "action_dim": 2}
TINY = {  # per registered model: a config small enough for a contract test in well under a second
    "conv": {"channels": [8, 16], "stem": 2, "cond_dim": 16, "head_hidden": 8, "ensemble": 3, "rollout_steps": 2},
    "diffusion": {"block_out_channels": [16, 16], "norm_num_groups": 8, "cond_dim": 16, "head_hidden": 8,
                  "head_channels": 8, "ensemble": 3, "denoising_steps": 2, "rollout_steps": 2},
}


def tiny_model(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return make_world_model(name, {**TINY[name], **SHAPES, **overrides}).eval()


def fake_batch(B=3, T=2, K=2, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"frames": torch.rand(B, T + K, 3, size, size, generator=g), "states": torch.randn(B, T + K, 6, generator=g),
            "actions": torch.rand(B, K, 2, generator=g) * 2 - 1, "reward": torch.zeros(B, K),
            "success": torch.tensor([[0.0, 1.0]] * B)[:, :K], "step_mask": torch.ones(B, K),
            "frame_mask": torch.tensor([[1.0, 0.0]] * B)[:, :K]}


def start_obs(B=4, seed=0):
    rng = np.random.default_rng(seed)
    return {IMAGE_KEY: rng.integers(0, 256, (B, 32, 32, 3), dtype=np.uint8),
            "observation.state": rng.normal(size=(B, 6)).astype(np.float32), "task": ("reach the red target",) * B}


def test_every_model_is_tested():
    assert set(TINY) == set(WORLD_MODELS)


def test_unknown_name_and_key_list_the_valid_ones():
    with pytest.raises(ValueError, match="valid world models: .*conv.*diffusion"):
        make_world_model("nope", SHAPES)
    with pytest.raises(ValueError, match="valid keys"):
        make_world_model("conv", {**SHAPES, "chanels": [8]})
    with pytest.raises(ValueError, match="shapes from the environment"):
        make_world_model("conv", {})


# -------------------------------------------------------------------------------------------------------------- #
# The contract, for every registered model
# -------------------------------------------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", sorted(WORLD_MODELS))
def test_step_and_predict_contract(name):
    model, b = tiny_model(name), fake_batch()
    with torch.no_grad():
        out = model.step(b["frames"][:, :2], b["states"][:, :2], b["actions"][:, 0], torch.Generator().manual_seed(0))
        pred = model.predict(b["frames"][:, :2], b["states"][:, :2], b["actions"], torch.Generator().manual_seed(0))
    assert out.frame.shape == (3, 3, 32, 32) and out.frame.dtype == torch.float32
    assert out.state.shape == (3, 6) and out.reward.shape == out.success_prob.shape == out.score_var.shape == (3,)
    assert 0 <= out.frame.min() and out.frame.max() <= 1
    assert pred.frames.shape == (3, 2, 3, 32, 32) and pred.states.shape == (3, 2, 6)
    for x in (pred.reward, pred.success_prob, pred.score_var):
        assert x.shape == (3, 2) and torch.isfinite(x).all()
    assert ((pred.success_prob >= 0) & (pred.success_prob <= 1)).all()
    assert (pred.score_var >= 0).all()
    assert (pred.score_var > 0).any(), "an untrained ensemble should disagree somewhere"


@pytest.mark.parametrize("name", sorted(WORLD_MODELS))
def test_deterministic_given_seed(name):
    b = fake_batch()
    outs = []
    for _ in range(2):
        model = tiny_model(name, seed=3)
        with torch.no_grad():
            outs.append(model.predict(b["frames"][:, :2], b["states"][:, :2], b["actions"],
                                      torch.Generator().manual_seed(7)))
    for a, c in zip(outs[0].__dict__.values(), outs[1].__dict__.values()):
        assert torch.equal(a, c)


@pytest.mark.parametrize("name", sorted(WORLD_MODELS))
def test_loss_is_finite_and_trains(name):
    model = tiny_model(name).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    b = fake_batch()
    losses = []
    for _ in range(3):
        loss, metrics = model.loss(b, torch.Generator().manual_seed(0))
        assert torch.isfinite(loss) and all(np.isfinite(v) for v in metrics.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("name", sorted(WORLD_MODELS))
def test_imagined_env_contract(name):
    model = tiny_model(name)
    env = ImaginedVectorEnv(model, start_obs=start_obs(), horizon=3, seed=0)
    obs, info = env.reset()
    assert env.num_envs == 4 and set(obs) == {IMAGE_KEY, "observation.state", "task"}
    assert env.single_observation_space[IMAGE_KEY].contains(obs[IMAGE_KEY][0])
    np.testing.assert_array_equal(obs[IMAGE_KEY], start_obs()[IMAGE_KEY])  # starts from the real frame
    for t in range(3):
        obs, reward, terminated, truncated, info = env.step(np.zeros((4, 2), np.float32))
        assert obs[IMAGE_KEY].shape == (4, 32, 32, 3) and obs[IMAGE_KEY].dtype == np.uint8
        assert obs["observation.state"].shape == (4, 6) and obs["observation.state"].dtype == np.float32
        assert obs["task"] == start_obs()["task"]
        assert reward.shape == (4,) and terminated.dtype == bool and truncated.dtype == bool
        assert set(info) >= {"score_var", "success_prob", "is_success"}
        assert (info["score_var"] >= 0).all() and ((info["success_prob"] >= 0) & (info["success_prob"] <= 1)).all()
        np.testing.assert_array_equal(terminated, info["success_prob"] > model.cfg.success_threshold)
    assert (truncated | terminated).all()  # the horizon was reached
    # Partial reset: only masked sub-environments restart from the given frames.
    mask = np.array([True, False, True, False])
    fresh = start_obs(seed=1)
    obs2, _ = env.reset(fresh, options={"reset_mask": mask})
    np.testing.assert_array_equal(obs2[IMAGE_KEY][mask], fresh[IMAGE_KEY][mask])
    np.testing.assert_array_equal(obs2[IMAGE_KEY][~mask], obs[IMAGE_KEY][~mask])


def test_imagined_env_tensors_and_bad_start():
    env = ImaginedVectorEnv(tiny_model("conv"), return_numpy=False)
    obs, _ = env.reset({k: (torch.as_tensor(v) if k != "task" else v) for k, v in start_obs().items()})
    obs, reward, terminated, _, info = env.step(torch.zeros(4, 2))
    assert torch.is_tensor(obs[IMAGE_KEY]) and torch.is_tensor(reward) and terminated.dtype == torch.bool
    with pytest.raises(KeyError, match="lacks camera"):
        env.reset({"observation.images.other": start_obs()[IMAGE_KEY], "observation.state": np.zeros((4, 6))})
    with pytest.raises(ValueError, match="start observations"):
        ImaginedVectorEnv(tiny_model("conv")).reset()


# -------------------------------------------------------------------------------------------------------------- #
# Checkpoints
# -------------------------------------------------------------------------------------------------------------- #
@pytest.mark.parametrize("name", sorted(WORLD_MODELS))
def test_checkpoint_round_trip(name, tmp_path):
    model, b = tiny_model(name), fake_batch()
    model.set_state_stats(torch.arange(6.0), torch.full((6,), 2.0))
    model.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"model.safetensors", "config.json"}
    assert json.loads((tmp_path / "config.json").read_text())["name"] == name
    loaded = load_world_model(tmp_path)
    assert torch.equal(loaded.state_mean, torch.arange(6.0))
    with torch.no_grad():
        a = model.predict(b["frames"][:, :2], b["states"][:, :2], b["actions"], torch.Generator().manual_seed(1))
        c = loaded.predict(b["frames"][:, :2], b["states"][:, :2], b["actions"], torch.Generator().manual_seed(1))
    assert torch.equal(a.frames, c.frames) and torch.equal(a.score_var, c.score_var)


def test_checkpoint_into_another_model_fails_clearly(tmp_path):
    tiny_model("conv").save(tmp_path)
    with pytest.raises(ValueError, match="holds world model 'conv', cannot load it into 'diffusion'"):
        tiny_model("diffusion").load_weights(tmp_path)
    with pytest.raises(ValueError, match="shape mismatches"):
        tiny_model("conv", channels=[8, 24]).load_weights(tmp_path)
    with pytest.raises(FileNotFoundError, match="no world-model checkpoint"):
        load_world_model(tmp_path / "missing")


# -------------------------------------------------------------------------------------------------------------- #
# Training on a real dataset (the `reach_dataset` fixture)
# -------------------------------------------------------------------------------------------------------------- #
REACH_TRAIN = {"channels": [16, 32], "stem": 2, "cond_dim": 32, "head_hidden": 16, "ensemble": 3, "rollout_steps": 2}


def _train(run_dir, dataset, **overrides):
    from vla_wmrl.config import SimConfig
    from vla_wmrl.train_world_model import TrainWorldModelConfig, train

    cfg = TrainWorldModelConfig(dataset=[str(dataset)], **{"steps": 120, "max_minutes": 1.5, "batch_size": 16,
                                                           "lr": 2e-3, "val_episodes": 3, "val_every": 1000,
                                                           "num_threads": 2, **overrides})
    sim = SimConfig(name="mujoco_reach", cameras=["top"], horizon=50)
    return train(cfg, {"name": "conv", **REACH_TRAIN}, sim, run_dir)


@pytest.fixture(scope="module")
def trained_reach(reach_dataset, tmp_path_factory):
    """A tiny conv model briefly trained on all but the last 3 reach episodes. Returns (run_dir, summary)."""
    run_dir = tmp_path_factory.mktemp("wm_run")
    return run_dir, _train(run_dir, reach_dataset)


def test_lr_schedule_ends_with_the_budget_that_ends_first(trained_reach):
    """The cosine schedule follows whichever budget is nearer its end: the run (120 steps or 1.5 minutes) ends at
    ~lr / 10 either way (before, a step budget ending first left the lr near its peak)."""
    _, summary = trained_reach
    assert summary["steps"] == 120 or summary["status"] == "time_budget"
    assert summary["final_lr"] < 0.11 * summary["train_config"]["lr"]


def test_lr_schedule_does_not_depend_on_the_machine_speed_when_steps_end_first():
    """Two builds of one world model differed from step 25 on because the schedule's time term took over while the
    first steps ran slowly: with the step budget ending first, the rate is a function of the step alone."""
    from vla_wmrl.train_world_model import schedule_progress, time_binds

    assert time_binds(500, 10_000, 60.0, 1800.0) is None  # too early to judge
    fast = time_binds(1000, 10_000, 160.0, 1800.0)  # 10000 steps projected at 1600 s < 1800 s
    assert fast is False
    assert schedule_progress(25, 10_000, 5.0, 1800.0, fast) == schedule_progress(25, 10_000, 0.1, 1800.0, fast) == 25e-4
    slow = time_binds(1000, 10_000, 300.0, 1800.0)  # projected 3000 s: the time budget ends first
    assert slow is True
    assert schedule_progress(1000, 10_000, 900.0, 1800.0, slow) == 0.5  # follows time, so the rate still decays
    assert time_binds(300, 100_000, 190.0, 1800.0) is True  # no real step budget: time decides
    assert schedule_progress(20_000, 10_000, 0.0, 1800.0, False) == 1.0


def _held_out_gain(run_dir, dataset) -> float:
    """One-step PSNR gain (dB) over copying the last frame on the 3 episodes a `_train` run held out."""
    from vla_wmrl.eval_world_model import open_loop
    from vla_wmrl.train_world_model import load_episodes

    model = load_world_model(run_dir / "checkpoints" / "last")
    data = load_episodes([dataset], [IMAGE_KEY])
    held = data.subset(range(len(data.episodes) - 3, len(data.episodes)))  # never trained on (val_episodes=3)
    out = open_loop(model, held, torch.arange(len(held)), 1, 256, torch.Generator().manual_seed(0))
    m = out["frame_valid"][:, 0]
    return float(out["psnr"][:, 0][m].mean() - out["psnr_copy"][:, 0][m].mean())


def test_trained_model_beats_copy_last_frame_on_held_out_episodes(trained_reach, reach_dataset):
    run_dir, summary = trained_reach
    assert summary["status"] in ("completed", "time_budget") and summary["steps"] > 20
    gain = _held_out_gain(run_dir, reach_dataset)
    assert gain > 0.3, f"one-step PSNR gain over copy-last-frame {gain:.2f} dB"
    assert (run_dir / "summary.json").exists() and any((run_dir / "tensorboard").iterdir())
    assert {p.name for p in (run_dir / "checkpoints" / "last").iterdir()} == {
        "model.safetensors", "config.json", "train_state.pt"}


def test_bf16_training_learns_like_fp32(trained_reach, reach_dataset, tmp_path):
    """precision=bf16 (autocast forward pass) trains the same model to about the same held-out one-step PSNR."""
    run_dir, summary = trained_reach
    bf16 = _train(tmp_path, reach_dataset, precision="bf16", max_minutes=100.0)
    assert bf16["status"] == "completed" and bf16["steps"] == 120 and bf16["train_config"]["precision"] == "bf16"
    gain, gain_fp32 = _held_out_gain(tmp_path, reach_dataset), _held_out_gain(run_dir, reach_dataset)
    assert gain > 0.3, f"bf16: one-step PSNR gain over copy-last-frame {gain:.2f} dB"
    assert gain > gain_fp32 - 1.0, f"bf16 gain {gain:.2f} dB against fp32's {gain_fp32:.2f} dB"
    with pytest.raises(ValueError, match=r"unknown world-model training precision 'fp8'.*'fp32', 'bf16'"):
        _train(tmp_path / "bad", reach_dataset, precision="fp8")


def test_resume_continues_and_refuses_silent_restart(trained_reach, reach_dataset):
    run_dir, summary = trained_reach
    with pytest.raises(FileExistsError, match="resume=true"):
        _train(run_dir, reach_dataset)
    resumed = _train(run_dir, reach_dataset, resume=True, steps=summary["steps"] + 5)
    assert resumed["steps"] == summary["steps"] + 5


def test_success_balanced_finetune_windows(trained_reach, reach_dataset):
    """Fine-tuning windows: ``success_frac`` of the new episodes' windows hold a success label (uniform windows
    rarely do); fine-tuning on them raises the predicted success where the episodes succeed, and with no success in
    the data, or ``success_frac=0``, sampling is uniform."""
    from vla_wmrl.train_world_model import (FRAMES, STATES, ACTIONS, SUCCESS, STEP_MASK, finetune, load_episodes,
                                            make_windows, sample_starts, success_window_starts)

    data = load_episodes([reach_dataset], [IMAGE_KEY])
    K = 2

    def holds_success(idx):
        w = make_windows(data, idx, 2, K)
        return ((w[SUCCESS] * w[STEP_MASK]).amax(1) > 0.5).float()

    pool = success_window_starts(data, K)
    assert len(pool) and holds_success(pool).all()  # every start it returns holds a success in its own episode
    gen = torch.Generator().manual_seed(0)
    uniform = holds_success(sample_starts(data, 400, gen, K)).mean()
    balanced = holds_success(sample_starts(data, 400, gen, K, success_frac=0.5)).mean()
    assert balanced >= 0.5 > uniform, (uniform, balanced)
    none = data.subset(range(len(data.episodes)))
    none.success.zero_()
    assert len(sample_starts(none, 16, gen, K, success_frac=0.5)) == 16  # nothing to balance: uniform
    with pytest.raises(ValueError, match="success_frac"):
        sample_starts(data, 16, gen, K, success_frac=1.5)

    run_dir, _ = trained_reach
    probe = make_windows(data, pool, 2, K)
    t = probe[SUCCESS].argmax(1)  # the step (0..K-1) of each probe window that holds the success label
    probs = {}
    for frac in (0.0, 0.5):
        model = load_world_model(run_dir / "checkpoints" / "last")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = finetune(model, opt, data, data, 15, torch.Generator().manual_seed(1), batch_size=16,
                          success_frac=frac)
        assert len(losses) == 15 and np.isfinite(losses).all()
        with torch.no_grad():
            pred = model.predict(probe[FRAMES][:, :2], probe[STATES][:, :2], probe[ACTIONS],
                                 generator=torch.Generator().manual_seed(0))
        probs[frac] = float(pred.success_prob[torch.arange(len(t)), t].mean())
    assert probs[0.5] > probs[0.0], probs


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(reach_dataset, tmp_path, monkeypatch):
    from world_models.conv import ConvWorldModel
    from vla_wmrl.train_world_model import NonFiniteLossError

    real_loss, calls = ConvWorldModel.loss, {"n": 0}

    def loss_going_nan(self, batch, generator=None):
        loss, metrics = real_loss(self, batch, generator)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 4 else loss), metrics

    monkeypatch.setattr(ConvWorldModel, "loss", loss_going_nan)
    with pytest.raises(NonFiniteLossError, match="Last good checkpoint kept"):
        _train(tmp_path, reach_dataset, ckpt_minutes=0.0, steps=50)
    kept = load_world_model(tmp_path / "checkpoints" / "last")
    assert all(torch.isfinite(p).all() for p in kept.parameters())
    state = torch.load(tmp_path / "checkpoints" / "last" / "train_state.pt", weights_only=False)
    assert state["step"] == 4
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "nonfinite_loss"


def test_dataset_that_does_not_match_the_sim_fails_naming_both_sides(reach_dataset, tmp_path):
    from vla_wmrl.train_world_model import check_dataset_matches

    with pytest.raises(ValueError, match=r"image size of top: dataset 64x64 vs sim 32x32.*action dimension: "
                                         r"dataset 2 vs sim 7"):
        check_dataset_matches(reach_dataset, [IMAGE_KEY], 32, 6, 7)
    with pytest.raises(ValueError, match=r"cameras: dataset \['observation.images.top'\] vs sim"):
        check_dataset_matches(reach_dataset, ["observation.images.agentview"], 64, 6, 2)
    from vla_wmrl.config import SimConfig
    from vla_wmrl.train_world_model import TrainWorldModelConfig, train

    with pytest.raises(ValueError, match="image size of top: dataset 64x64 vs sim mujoco_reach 48x48"):
        train(TrainWorldModelConfig(dataset=[str(reach_dataset)]), {"name": "conv", **REACH_TRAIN},
              SimConfig(name="mujoco_reach", cameras=["top"], image_size=48), tmp_path)


def test_configs_compose_for_every_model():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from pathlib import Path

    configs = str(Path(__file__).resolve().parents[1] / "configs")
    for name in WORLD_MODELS:
        with initialize_config_dir(config_dir=configs, version_base="1.3"):
            cfg = compose("train_world_model", overrides=[f"world_model={name}", "dataset=x"])
        model_cfg = world_models.make_config(name, OmegaConf.to_container(cfg.world_model))
        assert model_cfg.name == name
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        compose("eval_world_model", overrides=["checkpoint=x", "dataset=x"])
