"""GRPO: group-relative policy optimisation on corrected advantages, the whole loss readable top to bottom.

Each rollout ``i`` of a group carries one advantage ``A_i`` (standardised within its group by the reward-correction
core) and one loss weight ``w_i`` (anchor weight, inverse-variance weight and the length normaliser). Every step
``t`` of the rollout shares them. The loss over a minibatch of steps is the PPO-clipped surrogate

    L = - sum_t w_i(t) * min(rho_t A_i(t), clip(rho_t, 1 - eps, 1 + eps) A_i(t)) / num_rollouts
        + beta * KL_k3(pi || pi_ref)

(dual-clipped at ``c * A`` for negative advantages) with ``rho_t = pi(a_t|o_t) / pi_old(a_t|o_t)`` and the k3 estimator ``KL = exp(r) - r - 1``, ``r = log pi_ref -
log pi`` (Schulman's low-variance unbiased estimator), against the behaviour-cloned reference policy.

With ``freeze_encoder`` the policy's observation encoder (for TinyVLA: the CNN with its FiLM layers and the instruction
GRU) is held at its behaviour-cloned weights and only the action head learns. Each update then encodes its steps once,
without gradients, and its epochs, the rollout policy's and the reference's log-probabilities all run on the cached
features: the same update as running the frozen encoder every time, at a fraction of the cost. With
``freeze_encoder="backbone"`` the freeze stops earlier, at the policy's backbone (for TinyVLA: the conv blocks with
their FiLM layers, and the GRU): the features cached are the conv feature maps, and the image projection learns with
the head.

With ``precision="bf16"`` the update's forward passes (the loss, and the rollout policy's and the reference's
log-probabilities when computed here) run under bfloat16 autocast; weights, gradients and Adam's state stay float32.
On a CPU with native bf16 (AVX-512 BF16, AMX) or a GPU this is the cheaper update. Its log-probabilities differ from
float32 ones (~0.04 nats on average for Lift's behaviour-cloned policy, ~0.004 for random weights;
benchmarks/bf16_update_fidelity.py), so the trainer recomputes the old ones in bf16 rather than pass the recorded
float32 ones (``wmrl.rollout_log_prob=null``). On Lift WMRL gained 3.25 points less held-out with it (s.e. 2.8, 4
seeds), so the default is fp32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from vla_wmrl.policies.base import features_key


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters."""

    name: str = "grpo"
    lr: float = 1e-5              # Adam learning rate of the policy (configs/algo/grpo.yaml: why not 5e-5)
    epochs: int = 2               # passes over each step's rollouts
    minibatch_size: int = 256     # steps per gradient step
    micro_batch_size: int = 512   # steps per forward/backward pass (gradients accumulate up to minibatch_size):
                                  # bounds memory only, the update is the same
    clip_eps: float = 0.2         # PPO ratio clip
    dual_clip: float = 3.0        # for negative advantages, bound the surrogate at dual_clip * A (dual-clip PPO)
    max_log_ratio: float = 10.0   # clamp of log-ratios (policy/old and ref/policy) against overflow
    kl_coef: float = 0.02         # beta: KL penalty to the behaviour-cloned reference (0 = off)
    max_grad_norm: float = 1.0    # gradient-norm clip
    entropy_coef: float = 0.0     # entropy bonus
    target_kl: float | None = None  # stop an update's remaining minibatches once the approximate KL between the
                                    # rollout policy and the current one passes 1.5x this (PPO early stopping); None=off
    freeze_encoder: bool | str = False  # true: hold the policy's observation encoder fixed and train the action head
                                        # only, on features encoded once per update; "backbone": hold only the
                                        # encoder's backbone fixed (see the module docstring)
    precision: str = "fp32"       # fp32 | bf16: autocast of the update's forward passes (see the module docstring)


class GRPO:
    """GRPO updates of a policy exposing ``log_prob(batch, actions) -> (B,)`` and ``entropy(batch) -> (B,)``.

    Args:
        policy: the policy being trained (a torch module).
        ref_policy: frozen reference for the KL penalty (None disables it).
        cfg: hyper-parameters.
    """

    def __init__(self, policy: torch.nn.Module, ref_policy: torch.nn.Module | None, cfg: GRPOConfig):
        self.policy, self.ref_policy, self.cfg = policy, ref_policy, cfg
        self.frozen_part = _frozen_part(cfg.freeze_encoder)
        if cfg.precision not in PRECISIONS:
            raise ValueError(f"algo.precision={cfg.precision!r}: choose one of {list(PRECISIONS)}")
        if self.frozen_part:
            for p in policy.encoder_parameters(self.frozen_part):  # without that split a policy raises, naming it
                p.requires_grad_(False)
        self.optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
        if ref_policy is not None:
            ref_policy.eval().requires_grad_(False)

    @property
    def _uses_ref(self) -> bool:
        return self.ref_policy is not None and self.cfg.kl_coef > 0

    def log_prob(self, steps: dict, prepare=lambda b: b) -> torch.Tensor:
        """Log-probabilities of ``steps["action"]`` under the current policy, in chunks, without gradients."""
        self.policy.eval()
        with self._autocast():
            return _on_kept(_log_prob_of(self.policy), steps, torch.arange(len(steps["action"])), prepare).float()

    def _autocast(self):
        """The forward passes' precision context (``cfg.precision``); float32: no context."""
        if self.cfg.precision == "fp32":
            return contextlib.nullcontext()
        device = next(self.policy.parameters()).device.type
        return torch.autocast(device_type=device, dtype=PRECISIONS[self.cfg.precision])

    def update(self, steps: dict, advantages: np.ndarray, weights: np.ndarray, rollout_index: np.ndarray,
               num_rollouts: int, prepare=lambda b: b, generator: torch.Generator | None = None) -> dict:
        """One GRPO update.

        Args:
            steps: policy batch of all steps, keys as the policy expects (images, state, task) plus ``action``
                (S, A), optionally ``old_log_prob`` (S,) from the rollout policy (absent: the current policy is the
                rollout policy) and ``ref_log_prob`` (S,); absent ones are computed here, once per update.
            advantages: (R,) advantage of each rollout; weights: (R,) loss weight of each rollout.
            rollout_index: (S,) which rollout each step belongs to.
            num_rollouts: number of contributing rollouts (the loss normaliser).
            prepare: turns a minibatch of ``steps`` into the policy's batch format (e.g. uint8 -> float images).
            generator: draws the minibatch order; None: torch's global generator, whose state depends on everything
                the process drew before (a trainer passes its own, seeded per update, so a run reproduces and resumes
                with the same order).

        Returns:
            Mean loss terms and diagnostics over the update.
        """
        cfg = self.cfg
        adv = torch.as_tensor(advantages, dtype=torch.float32)[torch.as_tensor(rollout_index)]
        w = torch.as_tensor(weights, dtype=torch.float32)[torch.as_tensor(rollout_index)]
        keep = (w > 0).nonzero().flatten()  # steps of excluded rollouts carry no gradient
        stats = {"loss": [], "pg_loss": [], "kl": [], "clip_frac": [], "entropy": [], "grad_norm": [],
                 "approx_kl": []}
        if len(keep) == 0:
            return {"skipped": 1.0}
        with self._autocast():
            if self.frozen_part:
                steps, prepare = self._encoded(steps, keep, prepare), (lambda b: b)
            if "old_log_prob" not in steps:  # the rollout policy is the current one: score its actions before updating
                self.policy.eval()
                steps = dict(steps, old_log_prob=_on_kept(_log_prob_of(self.policy), steps, keep, prepare).float())
            if self._uses_ref and "ref_log_prob" not in steps:  # the reference is frozen: score once, not every epoch
                steps = dict(steps,
                             ref_log_prob=_on_kept(_log_prob_of(self.ref_policy), steps, keep, prepare).float())
        # Eval mode on purpose: training-time augmentation would make the ratio differ from 1 on unchanged weights.
        self.policy.eval()
        planned = cfg.epochs * -(-len(keep) // cfg.minibatch_size)
        for _ in range(cfg.epochs):
            perm = keep[torch.randperm(len(keep), generator=generator)]
            for start in range(0, len(perm), cfg.minibatch_size):
                idx = perm[start:start + cfg.minibatch_size]
                self.optimizer.zero_grad()
                terms = {}  # minibatch means of the loss terms and diagnostics
                for micro in idx.split(cfg.micro_batch_size):  # gradients accumulate; the step sees the minibatch
                    share = len(micro) / len(idx)
                    with self._autocast():
                        loss, micro_terms = self._loss(prepare(_index(steps, micro)), adv[micro], w[micro],
                                                       len(keep) / num_rollouts)
                    (loss * share).backward()
                    for key, value in micro_terms.items():
                        terms[key] = terms.get(key, 0.0) + share * value
                stats["approx_kl"].append(terms.pop("approx_kl"))  # KL(rollout || current), before this step
                if cfg.target_kl is not None and stats["approx_kl"][-1] > 1.5 * cfg.target_kl:
                    self.optimizer.zero_grad()
                    break
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for key, value in terms.items():
                    stats[key].append(value)
                stats["grad_norm"].append(float(grad_norm))
            else:
                continue
            break  # target_kl reached: skip the remaining epochs too
        out = {k: float(np.mean(v)) for k, v in stats.items() if v}
        out["approx_kl_last"] = stats["approx_kl"][-1]
        out["step_fraction"] = len(stats["loss"]) / planned  # gradient steps taken / planned (early stopping)
        return out

    def _encoded(self, steps: dict, keep: torch.Tensor, prepare) -> dict:
        """``steps`` with the observations replaced by the frozen encoder's features (computed for the kept steps,
        zeros elsewhere) and the reference's log-probabilities, when needed, taken from the same features if the
        reference's encoder is the policy's (the usual case: both start from the behaviour-cloned weights), else from
        the observations before they are dropped."""
        part = self.frozen_part
        if self._uses_ref and "ref_log_prob" not in steps and not _same_encoder(self.policy, self.ref_policy, part):
            steps = dict(steps, ref_log_prob=_on_kept(_log_prob_of(self.ref_policy), steps, keep, prepare))
        self.policy.eval()
        features = _on_kept(lambda batch: self.policy.encode(batch, part), steps, keep, prepare)
        kept = {k: steps[k] for k in ("action", "old_log_prob", "ref_log_prob") if k in steps}
        return {features_key(part): features, **kept}

    def _loss(self, mb: dict, a: torch.Tensor, wi: torch.Tensor, scale: float) -> tuple[torch.Tensor, dict]:
        """The loss of one micro-batch (see the module docstring) and its diagnostics (loss, pg_loss, kl, entropy,
        clip_frac, approx_kl)."""
        cfg = self.cfg
        log_prob = self.policy.log_prob(mb, mb["action"]).float()  # under bf16 autocast: the loss in float32
        log_ratio = (log_prob - mb["old_log_prob"]).clamp(-cfg.max_log_ratio, cfg.max_log_ratio)
        ratio = torch.exp(log_ratio)
        surrogate = torch.minimum(ratio * a, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * a)
        # Dual clip: a sample whose probability exploded under a negative advantage would otherwise dominate the
        # gradient (tanh-squashed actions near the box edge make such ratios common).
        surrogate = torch.where(a < 0, torch.maximum(surrogate, cfg.dual_clip * a), surrogate)
        # Each rollout's steps share its weight; ``scale`` = kept steps / rollouts makes the mean over steps an
        # unbiased estimate of the full sum over steps / num_rollouts, so the scale does not depend on length (the
        # length normaliser, if chosen, is already folded into w by the correction core).
        pg_loss = -(wi * surrogate).mean() * scale
        loss = pg_loss
        kl = torch.zeros(())
        if self._uses_ref:
            r = (mb["ref_log_prob"] - log_prob).clamp(-cfg.max_log_ratio, cfg.max_log_ratio)
            kl = (torch.exp(r) - r - 1).mean()
            loss = loss + cfg.kl_coef * kl
        entropy = torch.zeros(())
        if cfg.entropy_coef > 0:
            entropy = self.policy.entropy(mb).float().mean()
            loss = loss - cfg.entropy_coef * entropy
        if not torch.isfinite(loss):
            raise FloatingPointError(f"GRPO loss is {loss.item()} (pg {pg_loss.item()}, kl {kl.item()}); "
                                     "lower algo.lr or check the advantages")
        with torch.no_grad():
            clip_frac = ((ratio - 1).abs() > cfg.clip_eps).float().mean().item()
            approx_kl = ((ratio - 1) - log_ratio).mean().item()
        return loss, {"loss": loss.item(), "pg_loss": pg_loss.item(), "kl": kl.item(), "entropy": entropy.item(),
                      "clip_frac": clip_frac, "approx_kl": approx_kl}


@torch.no_grad()
def _on_kept(fn, steps: dict, keep: torch.Tensor, prepare, chunk: int = 512) -> torch.Tensor:
    """``fn`` (a prepared batch -> a tensor with one row per step) over the ``keep`` steps, in chunks, without
    gradients; zeros at the other steps (excluded rollouts, never read)."""
    out = torch.cat([fn(prepare(_index(steps, idx))) for idx in keep.split(chunk)])
    full = out.new_zeros((len(steps["action"]), *out.shape[1:]))
    full[keep] = out
    return full


def _log_prob_of(policy):
    return lambda batch: policy.log_prob(batch, batch["action"])


def _same_encoder(policy, other, part: str) -> bool:
    return all(torch.equal(p, q) for p, q in zip(policy.encoder_parameters(part), other.encoder_parameters(part)))


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}  # algo.precision -> autocast dtype
_FREEZE = {False: None, True: "encoder", "backbone": "backbone"}  # algo.freeze_encoder -> where the policy splits


def _frozen_part(value) -> str | None:
    if value not in _FREEZE or not isinstance(value, (bool, str)):
        raise ValueError(f"algo.freeze_encoder={value!r}: choose false (train the whole policy), true (freeze the "
                         f"observation encoder) or backbone (freeze the encoder's backbone; its projection learns)")
    return _FREEZE[value]


def _index(batch: dict, idx: torch.Tensor) -> dict:
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            out[k] = v[idx]
        else:  # e.g. the list of instructions
            out[k] = [v[i] for i in idx.tolist()]
    return out
