"""GRPO (vla_wmrl.algos.grpo): the update moves probability towards positive advantages, away from negative ones,
and rollouts with weight 0 (excluded by the correction core) have no effect at all."""

import copy

import numpy as np
import pytest
import torch
from test_policies import random_batch, small_policy

from vla_wmrl.algos.grpo import GRPO, GRPOConfig
from vla_wmrl.policies.base import StochasticPolicy


def _steps(policy, n_rollouts, steps_per_rollout=8, seed=0):
    batch = random_batch(n_rollouts * steps_per_rollout, seed=seed)
    with torch.no_grad():
        batch["action"] = policy.select_action(batch, generator=torch.Generator().manual_seed(seed))
    return batch, np.repeat(np.arange(n_rollouts), steps_per_rollout)


def test_update_follows_advantages_and_ignores_zero_weight_rollouts():
    torch.manual_seed(0)
    policy = small_policy()
    steps, index = _steps(policy, 3)
    before = policy.log_prob(steps, steps["action"]).detach()
    twin = copy.deepcopy(policy)
    cfg = GRPOConfig(lr=1e-3, epochs=2, minibatch_size=64, kl_coef=0.0)
    adv, w = np.array([1.0, -1.0, 5.0]), np.array([1.0, 1.0, 0.0])  # rollout 2 is excluded
    torch.manual_seed(1)
    GRPO(policy, None, cfg).update(steps, adv, w, index, num_rollouts=2)
    after = policy.log_prob(steps, steps["action"]).detach()
    gain = [(after - before)[torch.as_tensor(index == i)].mean().item() for i in range(2)]
    assert gain[0] > 0 > gain[1], gain

    # The same update without the excluded rollout's steps leaves identical weights.
    keep = torch.as_tensor(index < 2)
    fewer = {k: (v[keep] if isinstance(v, torch.Tensor) else [t for t, m in zip(v, keep) if m]) for k, v in steps.items()}
    torch.manual_seed(1)
    GRPO(twin, None, cfg).update(fewer, adv[:2], w[:2], index[:16], num_rollouts=2)
    for (name, a), b in zip(policy.state_dict().items(), twin.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_target_kl_stops_the_update_early_and_bounds_the_policy_change():
    """PPO early stopping: with a small target_kl the update ends after a few minibatches and the policy moves less
    (KL from the rollout policy) than the same update run to the end."""
    torch.manual_seed(0)
    base = small_policy()
    steps, index = _steps(base, 8)
    adv, w = np.array([1.0, -1.0] * 4), np.ones(8)
    moved = {}
    for target in (None, 1e-3):
        policy = copy.deepcopy(base)
        torch.manual_seed(1)
        out = GRPO(policy, None, GRPOConfig(lr=3e-4, epochs=4, minibatch_size=8, kl_coef=0.0, target_kl=target)).update(
            steps, adv, w, index, num_rollouts=8)
        with torch.no_grad():
            log_ratio = policy.log_prob(steps, steps["action"]) - base.log_prob(steps, steps["action"])
        moved[target] = ((log_ratio.exp() - 1) - log_ratio).mean().item()
        if target is None:
            assert out["step_fraction"] == 1.0
        else:
            assert out["step_fraction"] < 0.5 and out["approx_kl_last"] > 1.5 * target, out
    assert moved[1e-3] < moved[None] / 3, moved


def test_micro_batches_give_the_same_update():
    """micro_batch_size only bounds memory: accumulating a minibatch's gradient in pieces takes the same step."""
    torch.manual_seed(0)
    base = small_policy()
    steps, index = _steps(base, 4)
    adv, w = np.array([1.0, -1.0, 0.5, -0.5]), np.array([1.0, 2.0, 1.0, 0.5])
    params = []
    for micro in (32, 5):
        policy = copy.deepcopy(base)
        algo = GRPO(policy, None, GRPOConfig(epochs=2, minibatch_size=32, micro_batch_size=micro, kl_coef=0.0))
        # SGD, not Adam: Adam normalises near-zero gradients (conv biases before a norm layer) to full-size steps,
        # which would turn float summation-order noise into differences.
        algo.optimizer = torch.optim.SGD(policy.parameters(), lr=1e-2)
        torch.manual_seed(1)
        algo.update(steps, adv, w, index, num_rollouts=4)
        params.append(policy.state_dict())
    for name in params[0]:
        torch.testing.assert_close(params[0][name], params[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_the_minibatch_order_comes_from_the_given_generator_not_the_global_one():
    """A run reproduces (and resumes) only if its updates do not depend on torch's global generator, whose state
    depends on what the process ran before (the trainer's cached stages draw nothing from it)."""
    torch.manual_seed(0)
    base = small_policy()
    steps, index = _steps(base, 4)
    adv, w = np.array([1.0, -1.0, 0.5, -0.5]), np.ones(4)
    params = {}
    for generator_seed, global_seed in ((7, 1), (7, 2), (None, 1), (None, 2)):
        policy = copy.deepcopy(base)
        algo = GRPO(policy, None, GRPOConfig(lr=1e-3, epochs=2, minibatch_size=8, kl_coef=0.0))
        torch.manual_seed(global_seed)
        gen = None if generator_seed is None else torch.Generator().manual_seed(generator_seed)
        algo.update(steps, adv, w, index, num_rollouts=4, generator=gen)
        params[generator_seed, global_seed] = torch.cat([p.flatten() for p in policy.parameters()])
    assert torch.equal(params[7, 1], params[7, 2])
    assert not torch.equal(params[None, 1], params[None, 2])  # the order matters: the check above can fail


def test_the_frozen_reference_is_scored_once_per_update_and_the_kl_penalty_holds_the_policy_near_it():
    """The KL term's reference log-probabilities are computed once per update (the reference is frozen), not once per
    epoch and minibatch; the penalty still does its job: a strong kl_coef keeps the policy closer to the reference."""
    torch.manual_seed(0)
    base = small_policy()
    steps, index = _steps(base, 8)
    adv, w = np.array([1.0, -1.0] * 4), np.ones(8)
    moved = {}
    for kl_coef in (0.0, 1.0):
        policy, ref = copy.deepcopy(base), copy.deepcopy(base)
        calls = []
        ref_log_prob = ref.log_prob
        ref.log_prob = lambda batch, actions: calls.append(len(actions)) or ref_log_prob(batch, actions)
        torch.manual_seed(1)
        out = GRPO(policy, ref, GRPOConfig(lr=1e-3, epochs=4, minibatch_size=16, kl_coef=kl_coef)).update(
            steps, adv, w, index, num_rollouts=8)
        if kl_coef:
            assert sum(calls) == len(index) and out["kl"] > 0, (calls, out)  # every step scored exactly once
        else:
            assert not calls
        with torch.no_grad():
            r = base.log_prob(steps, steps["action"]) - policy.log_prob(steps, steps["action"])
        moved[kl_coef] = (r.exp() - r - 1).mean().item()
    assert moved[1.0] < moved[0.0], moved


@pytest.mark.parametrize("freeze", [True, "backbone"])
@pytest.mark.parametrize("ref_encoder", ["same", "different"])
def test_a_frozen_encoder_trains_the_head_alone_on_features_encoded_once(ref_encoder, freeze):
    """algo.freeze_encoder (the whole encoder, or its backbone only): the frozen part keeps its weights, the rest
    learns, and the update equals that of running the frozen part on every minibatch (with a reference whose encoder is
    the policy's or its own), while the frozen part sees each kept step once (the update's cost) instead of at every
    pass."""
    torch.manual_seed(0)
    base = small_policy()
    part = "encoder" if freeze is True else freeze
    steps, index = _steps(base, 6)
    adv, w = np.array([1.0, -1.0, 0.5, -0.5, 1.0, -1.0]), np.array([1.0, 1.0, 1.0, 0.0, 2.0, 1.0])
    ref = copy.deepcopy(base)
    if ref_encoder == "different":
        with torch.no_grad():
            for p in ref.encoder_parameters():
                p.add_(0.05 * torch.randn_like(p))
    encoded, params = {}, {}
    for cached in (True, False):
        policy = copy.deepcopy(base)
        if not cached:  # the same algorithm the slow way: the frozen part held by hand, run at every pass
            for p in policy.encoder_parameters(part):
                p.requires_grad_(False)
        algo = GRPO(policy, copy.deepcopy(ref), GRPOConfig(epochs=3, minibatch_size=16, kl_coef=0.5,
                                                           freeze_encoder=freeze if cached else False))
        algo.optimizer = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
        sizes = []
        backbone = policy.image_encoder.backbone
        policy.image_encoder.backbone = lambda images, cond=None: sizes.append(len(images)) or backbone(images, cond)
        out = algo.update(steps, adv, w, index, num_rollouts=5, generator=torch.Generator().manual_seed(3))
        assert out["kl"] > 0, out
        encoded[cached], params[cached] = sum(sizes), policy.state_dict()
    kept_steps = int((w[index] > 0).sum())
    assert encoded[True] == kept_steps and encoded[False] > 3 * kept_steps, encoded
    frozen = {n for n, _ in base.named_parameters() if n.startswith(("image_encoder.", "text_encoder."))
              and (part == "encoder" or not n.startswith("image_encoder.proj."))}
    assert len(frozen) == len(base.encoder_parameters(part))
    for name, value in base.state_dict().items():
        if name in frozen:
            assert torch.equal(params[True][name], value), name
        torch.testing.assert_close(params[True][name], params[False][name], atol=1e-5, rtol=1e-4, msg=name)
    assert not torch.equal(params[True]["mean_head.weight"], base.state_dict()["mean_head.weight"])
    proj = params[True]["image_encoder.proj.1.weight"]
    assert torch.equal(proj, base.state_dict()["image_encoder.proj.1.weight"]) == (part == "encoder")


def test_an_unknown_freeze_setting_names_the_choices():
    with pytest.raises(ValueError, match="choose false .* true .* or backbone"):
        GRPO(small_policy(), None, GRPOConfig(freeze_encoder="conv"))


def test_freeze_encoder_on_a_policy_without_an_encoder_head_split_names_the_option():
    class Whole(torch.nn.Module, StochasticPolicy):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 2)

        select_action = log_prob = entropy = forward = None

    with pytest.raises(NotImplementedError, match="algo.freeze_encoder=false"):
        GRPO(Whole(), None, GRPOConfig(freeze_encoder=True))


def test_a_bf16_update_follows_the_advantages_like_fp32_with_float32_weights():
    """algo.precision=bf16: the forward passes run under bfloat16 autocast, the update still moves probability towards
    positive advantages and away from negative ones as the float32 update does, and the weights stay float32."""
    torch.manual_seed(0)
    base = small_policy()
    steps, index = _steps(base, 4)
    adv, w = np.array([1.0, -1.0, 1.0, -1.0]), np.ones(4)
    with torch.no_grad():
        before = base.log_prob(steps, steps["action"])
    gains = {}
    for precision in ("fp32", "bf16"):
        policy = copy.deepcopy(base)
        torch.manual_seed(1)
        out = GRPO(policy, copy.deepcopy(base), GRPOConfig(lr=1e-3, epochs=2, minibatch_size=16,
                                                           precision=precision)).update(steps, adv, w, index, 4)
        assert all(p.dtype == torch.float32 for p in policy.parameters())
        assert np.isfinite(out["loss"]) and out["kl"] >= 0, out
        with torch.no_grad():
            delta = policy.log_prob(steps, steps["action"]) - before
        gains[precision] = np.array([delta[torch.as_tensor(index == i)].mean().item() for i in range(4)])
        assert (np.sign(gains[precision]) == np.sign(adv)).all(), (precision, gains[precision])
    # The two updates agree closely: bf16 changes the arithmetic, not the direction or size of the step.
    assert np.abs(gains["bf16"] - gains["fp32"]).max() < 0.25 * np.abs(gains["fp32"]).max(), gains


def test_an_unknown_precision_names_the_choices():
    with pytest.raises(ValueError, match=r"algo.precision='fp16'.*\['fp32', 'bf16'\]"):
        GRPO(small_policy(), None, GRPOConfig(precision="fp16"))
