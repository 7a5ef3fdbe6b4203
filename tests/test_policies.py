"""Policy contract, behaviour cloning, LeRobot save/load, bad input and language use (vla_wmrl.policies)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lerobot.configs.types import FeatureType, PolicyFeature

from vla_wmrl.policies import (POLICIES, RolloutAdapter, get_policy_class, load_policy, make_policy,
                               make_policy_config)

IMG = "observation.images.top"
SMALL = {"conv_channels": [8, 16, 16], "image_embed_dim": 32, "text_byte_dim": 8, "text_hidden_dim": 16,
         "hidden_dim": 32}


def features(image=(3, 32, 32), state=(6,), action=(2,)):
    inputs = {IMG: PolicyFeature(FeatureType.VISUAL, image), "observation.state": PolicyFeature(FeatureType.STATE, state)}
    return inputs, {"action": PolicyFeature(FeatureType.ACTION, action)}


def small_policy(name="tiny_vla", action=(2,), **overrides):
    inputs, outputs = features(action=action)
    cfg = make_policy_config(name, device="cpu", input_features=inputs, output_features=outputs, **{**SMALL, **overrides})
    return make_policy(cfg)


def random_batch(n=4, seed=0, tasks=("reach the red target", "reach the blue target")):
    g = torch.Generator().manual_seed(seed)
    return {IMG: torch.rand(n, 3, 32, 32, generator=g), "observation.state": torch.randn(n, 6, generator=g),
            "task": [tasks[i % len(tasks)] for i in range(n)]}


def repeat(batch, k):
    return {key: [v[0]] * k if key == "task" else v[:1].expand(k, *v.shape[1:]) for key, v in batch.items()}


# ----------------------------------------------------------------------------------------------- registry ----- #
def test_unknown_policy_lists_valid_names():
    with pytest.raises(ValueError, match="valid policies: .*tiny_vla"):
        make_policy_config("no_such_policy")
    with pytest.raises(ValueError, match="tiny_vla"):
        get_policy_class("expert")  # the collection expert is not a trainable policy


# ----------------------------------------------------------------------------------------------- contract ----- #
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_contract_shapes_and_determinism(name):
    torch.manual_seed(0)
    policy = small_policy(name)
    batch = random_batch()
    a = policy.select_action(batch)
    assert a.shape == (4, 2) and a.abs().max() <= 1.0
    d1, d2 = policy.select_action(batch, deterministic=True), policy.select_action(batch, deterministic=True)
    assert torch.equal(d1, d2)
    assert not torch.equal(policy.select_action(batch), policy.select_action(batch))
    lp, ent = policy.log_prob(batch, a), policy.entropy(batch)
    assert lp.shape == (4,) and ent.shape == (4,) and torch.isfinite(lp).all() and torch.isfinite(ent).all()
    # Both are differentiable with respect to the mean and the standard deviation (RL needs that).
    (lp.sum() + ent.sum()).backward()
    assert policy.log_std.grad is not None and policy.log_std.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.image_encoder.parameters())
    policy.reset()


def _samples(policy, bias, n=4000):
    with torch.no_grad():
        policy.mean_head.weight.zero_()
        policy.mean_head.bias.copy_(torch.tensor(bias))
        first, many = random_batch(1), repeat(random_batch(1), n)
        samples = policy.select_action(many, generator=torch.Generator().manual_seed(1))
        lp = policy.log_prob(many, samples)
        entropy = policy.entropy(repeat(first, 256)).mean()  # 256 x entropy_samples Monte-Carlo draws
        det = policy.select_action(first, deterministic=True)
        return samples, lp, entropy, det, policy.log_prob(first, det)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_log_prob_consistent_with_sampling(name):
    torch.manual_seed(0)
    policy = small_policy(name)
    # Off-centre mean, where the tanh Jacobian matters.
    samples, lp, entropy, det, lp_det = _samples(policy, [0.8, -0.3])
    # E[-log p(a)] over the policy's own samples is its entropy.
    assert abs(-lp.mean().item() - entropy.item()) < 0.05 + 0.02 * abs(entropy.item())
    # The deterministic action is the central action: the per-dimension median of the samples. (The Jacobian moves
    # the squashed density's mode slightly towards the box edge, so off-centre it is not exactly the mode.)
    assert torch.allclose(samples.median(0).values, det[0], atol=0.03)
    assert lp_det.item() >= torch.quantile(lp, 0.75).item()
    # The sampled spread matches the configured standard deviation (pre-tanh).
    u = torch.atanh(samples.clamp(-0.999999, 0.999999))
    assert torch.allclose(u.std(0), torch.full((2,), math.exp(policy.config.init_log_std)), rtol=0.1)
    # Centred (mean 0, std < 1/sqrt(2)), the deterministic action is the mode: more likely than every sample.
    samples, lp, entropy, det, lp_det = _samples(policy, [0.0, 0.0])
    assert lp_det.item() >= lp.max().item()
    assert abs(-lp.mean().item() - entropy.item()) < 0.05 + 0.02 * abs(entropy.item())


def test_log_prob_matches_closed_form():
    """log p(a) = log N(atanh a; mu, sigma) - log(1 - a^2), checked against torch.distributions."""
    policy = small_policy()
    batch = random_batch(6)
    with torch.no_grad():
        mean, log_std = policy._distribution(batch)
        actions = policy.select_action(batch)
        base = torch.distributions.Normal(mean, log_std.exp())
        u = torch.atanh(actions)
        want = (base.log_prob(u) - torch.log(1 - actions ** 2)).sum(-1)
        assert torch.allclose(policy.log_prob(batch, actions), want, atol=1e-3)


# --------------------------------------------------------------------------------------- behaviour cloning ----- #
@pytest.fixture(scope="module")
def reach_frames(reach_dataset):
    from vla_wmrl.sft import load_frames

    return load_frames(reach_dataset)


def test_short_bc_run_lowers_loss(reach_frames, tmp_path):
    from vla_wmrl.sft import SFTConfig, sample_batch, train

    frames, meta = reach_frames
    torch.manual_seed(0)
    policy = make_policy(make_policy_config("tiny_vla", device="cpu", **SMALL), meta)
    fixed = sample_batch(frames, torch.arange(len(frames["task"])), "cpu")
    policy.eval()
    with torch.no_grad():
        before = policy(fixed)[1]["mse"]
    summary = train(policy, frames, SFTConfig(steps=60, batch_size=32, log_every=20, save_every=30), tmp_path)
    with torch.no_grad():
        after = policy(fixed)[1]["mse"]
    assert summary["steps"] == 60 and after < 0.7 * before, (before, after)
    assert (tmp_path / "pretrained_model" / "model.safetensors").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000030", "step_000060"]
    assert list(tmp_path.glob(".*tmp")) == []  # atomic saves leave no temporary directories
    # The state statistics come from the dataset and are part of the weights.
    assert torch.allclose(policy.state_mean, torch.as_tensor(meta.stats["observation.state"]["mean"]).float())


# ------------------------------------------------------------------------------------------------- LeRobot ----- #
def test_lerobot_round_trip_gives_identical_actions(reach_frames, tmp_path):
    """Saved with save_pretrained, loaded through LeRobot's own path: config registry + policy factory."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class as lerobot_get_policy_class
    from lerobot.policies.factory import make_policy as lerobot_make_policy
    from lerobot.policies.factory import make_pre_post_processors

    from vla_wmrl.sft import sample_batch

    frames, meta = reach_frames
    torch.manual_seed(0)
    policy = make_policy(make_policy_config("tiny_vla", device="cpu", **SMALL), meta)
    with torch.no_grad():
        policy.log_std.fill_(-0.7)  # differ from the init, so a silently re-initialised policy would be caught
    policy.save_pretrained(tmp_path)
    batch = sample_batch(frames, torch.arange(16), "cpu")

    config = PreTrainedConfig.from_pretrained(tmp_path)
    assert config.type == "tiny_vla" and config.input_features == policy.config.input_features
    loaded = lerobot_get_policy_class(config.type).from_pretrained(tmp_path, config=config)
    config.pretrained_path = tmp_path
    via_factory = lerobot_make_policy(config, ds_meta=meta)
    for other in (loaded, via_factory):
        assert torch.equal(other.select_action(batch, deterministic=True), policy.select_action(batch, deterministic=True))
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        assert torch.equal(other.select_action(batch, generator=g1), policy.select_action(batch, generator=g2))
        a = policy.select_action(batch)
        assert torch.allclose(other.log_prob(batch, a), policy.log_prob(batch, a))
        assert torch.equal(other.state_std, policy.state_std)

    # LeRobot's processor pipelines (found by naming convention) turn one raw observation into a policy batch.
    pre, post = make_pre_post_processors(config)
    single = {k: v[0] for k, v in batch.items() if k != "task"} | {"task": batch["task"][0]}
    action = post(loaded.select_action(pre(single), deterministic=True))
    assert torch.allclose(action, policy.select_action(batch, deterministic=True)[:1])


# ----------------------------------------------------------------------------------------------- bad input ----- #
def test_bad_observation_keys_and_shapes_name_expected_and_received():
    policy = small_policy()
    batch = random_batch()
    with pytest.raises(KeyError, match=r"expected \['observation.images.top', 'observation.state', 'task'\].*"
                                       r"received \['observation.images.front'"):
        policy.select_action({"observation.images.front": batch[IMG], **{k: v for k, v in batch.items() if k != IMG}})
    with pytest.raises(ValueError, match=r"expected shape \(B, 3, 32, 32\).*received \(4, 32, 32, 3\)"):
        policy.select_action({**batch, IMG: batch[IMG].permute(0, 2, 3, 1)})
    with pytest.raises(ValueError, match=r"observation.state.*expected shape \(B, 6\).*received \(4, 9\)"):
        policy.select_action({**batch, "observation.state": torch.zeros(4, 9)})
    with pytest.raises(ValueError, match="one per sample"):
        policy.select_action({**batch, "task": "reach the red target"})
    with pytest.raises(ValueError, match="'action' must have shape"):
        policy({**batch, "action": torch.zeros(4, 7)})


def test_checkpoint_with_other_action_dim_fails_clearly(tmp_path):
    import sims

    inputs, _ = features(image=(3, 64, 64))
    cfg = make_policy_config("tiny_vla", device="cpu", input_features=inputs,
                             output_features={"action": PolicyFeature(FeatureType.ACTION, (7,))}, **SMALL)
    make_policy(cfg).save_pretrained(tmp_path)
    env = sims.make_env("mujoco_reach", image_size=64)
    try:
        with pytest.raises(ValueError, match=r"actions of shape \(7,\) but the environment expects \(2,\)"):
            load_policy(tmp_path, env)
    finally:
        env.close()
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        load_policy(tmp_path / "nothing")
    # Weights that do not fit the saved config are refused (LeRobot alone would load them non-strictly).
    import json

    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_dim": 48}))
    with pytest.raises(RuntimeError, match="size mismatch|Missing|Unexpected|Error"):
        load_policy(tmp_path)


def test_rollout_adapter_drives_run_episodes(reach_frames):
    import sims
    from vla_wmrl.rollout import run_episodes

    _, meta = reach_frames
    policy = make_policy(make_policy_config("tiny_vla", device="cpu", **SMALL), meta)
    envs = sims.make_vector_env("mujoco_reach", 2, asynchronous=False, horizon=5)
    try:
        eps = list(run_episodes(envs, RolloutAdapter(policy, deterministic=True), [100000, 100001, 100002, 100003]))
    finally:
        envs.close()
    assert sorted(e.seed for e in eps) == [100000, 100001, 100002, 100003]
    assert all(np.abs(f["action"]).max() <= 1.0 for e in eps for f in e.frames)


# ------------------------------------------------------------------------------------------------ language ----- #
def test_instruction_alone_changes_actions():
    """Same image and state, two instructions, two demonstrated actions: the policy must learn to tell them apart
    through the instruction encoder alone (nothing else differs)."""
    torch.manual_seed(0)
    policy = small_policy(crop_pad=0)
    red, blue = "reach the red target", "reach the blue target"
    batch = repeat(random_batch(1), 32)
    batch["task"] = [red, blue] * 16
    batch["action"] = torch.tensor([[0.6, -0.4], [-0.6, 0.4]]).repeat(16, 1)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(60):
        loss, _ = policy(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    probe = repeat(random_batch(1), 2)
    probe["task"] = [red, blue]
    a = policy.select_action(probe, deterministic=True)
    assert torch.allclose(a, torch.tensor([[0.6, -0.4], [-0.6, 0.4]]), atol=0.15), a
    # Unseen wording still gives an action (bytes, no vocabulary), and the instruction cache is per string.
    policy.select_action({**repeat(random_batch(1), 1), "task": ["Reach the GREEN target!"]})
    assert set(policy._text_cache) == {red, blue, "Reach the GREEN target!"}


def _final_distances(policy, seed: int, colour: str, steps: int = 50) -> dict:
    """Run ``policy`` told to reach ``colour`` from the start state of ``seed``; fingertip-to-target distances at the
    end, per target colour. (With ``colour`` fixed, the start state of a seed is the same for both colours.)"""
    import sims
    from vla_wmrl.policies.base import obs_to_batch

    env = sims.make_env("mujoco_reach", image_size=64, colour=colour, horizon=steps)
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(steps):
            batch = obs_to_batch({k: [v] if k == "task" else np.asarray(v)[None] for k, v in obs.items()},
                                 policy.config.input_features)
            obs, _, terminated, truncated, _ = env.step(policy.select_action(batch, deterministic=True)[0].numpy())
            if terminated or truncated:
                break
        tip = env._fingertip()
        return {c: float(np.linalg.norm(tip - env._target_pos(c))) for c in ("red", "blue")}
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.xfail(reason="BC does not yet learn to reach in mujoco_reach (see docs/policies.md, Results)", strict=False)
def test_language_decides_the_target_in_mujoco_reach(tmp_path):
    """Behaviour cloning on expert `mujoco_reach` data (the instruction names the target). From the same start
    states, "reach the red target" and "reach the blue target" must end near different targets: the named one."""
    from vla_wmrl.collect import collect
    from vla_wmrl.config import ExpertConfig, SimConfig
    from vla_wmrl.eval import evaluate
    from vla_wmrl.sft import SFTConfig, load_frames, train

    torch.set_num_threads(1)
    sim = SimConfig(name="mujoco_reach", cameras=["top"], horizon=50)
    collect(sim, ExpertConfig(noise=0.0), episodes=60, root=str(tmp_path / "reach"), repo_id="local/reach_lang",
            seed=0, num_envs=2, video=True)
    frames, meta = load_frames(tmp_path / "reach")
    torch.manual_seed(0)
    policy = make_policy(make_policy_config("tiny_vla", device="cpu"), meta)
    train(policy, frames, SFTConfig(steps=2500, max_minutes=7, batch_size=64, save_every=0), tmp_path / "run")
    policy.eval()
    closer, named, other = [], [], []
    for seed in range(100000, 100010):
        for colour, rival in (("red", "blue"), ("blue", "red")):
            d = _final_distances(policy, seed, colour)
            closer.append(d[colour] < d[rival])
            named.append(d[colour])
            other.append(d[rival])
    rates = {}
    for colour, rival in (("red", "blue"), ("blue", "red")):
        for told in (colour, rival):
            rates[f"{colour} target, told {told}"] = evaluate(
                policy, sim, episodes=20, num_envs=2, seed=100000, task=f"reach the {told} target",
                env_kwargs={"colour": colour}, progress=False)["success_rate"]
    print(f"ends closer to the named target in {np.mean(closer):.0%} of 20 runs; mean final distance to the named "
          f"target {np.mean(named):.3f} m, to the other {np.mean(other):.3f} m; success rates {rates}")
    assert np.mean(closer) >= 0.75 and np.mean(named) < 0.5 * np.mean(other)
