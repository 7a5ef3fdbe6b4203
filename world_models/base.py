"""The contract every world model in `world_models/` follows, and the pieces they share.

A world model sees ``context`` past camera frames and proprioceptive states and an action, and predicts what follows:

- the next frame (all cameras stacked along channels) and the next proprioceptive state,
- a reward, a success probability (the *score* WMRL grades imagined rollouts by) and termination,
- a per-step predictive variance of the score (``score_var``), so imagined samples can be weighted by confidence.

Tensor conventions (``B`` batch, ``T`` context frames, ``K`` steps, ``C = 3 * cameras``):

- frames are float in [0, 1], ``(B, T, C, H, W)``; states ``(B, T, D)``; actions ``(B, A)`` or ``(B, K, A)``.
- ``batch`` for :meth:`WorldModel.loss` is a dict of training windows (see :func:`WorldModel.loss`).

Uncertainty, shared by every model here: an ensemble of ``ensemble`` small reward/success heads on the model's features,
each trained on its own bootstrap resample of every batch (a random half of the samples) from its own random
initialisation. ``score_var`` is the variance of the members' success probabilities: their *disagreement*, which is
large where the training data said little (epistemic uncertainty), and says nothing about outcomes that are genuinely
random. ``WorldModelConfig.variance = "total"`` adds the mean Bernoulli variance ``p (1 - p)`` of the members (the law of
total variance for the 0/1 outcome), which also counts the outcome's own randomness.
"""

from __future__ import annotations

import abc
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# Keys of a training window (see WorldModel.loss).
FRAMES, STATES, ACTIONS, REWARD, SUCCESS, STEP_MASK, FRAME_MASK = (
    "frames", "states", "actions", "reward", "success", "step_mask", "frame_mask")


@dataclass
class WorldModelConfig:
    """Fields every world model has. Shapes are filled from the environment/dataset at run time, never from YAML."""

    name: str = ""                 # registry key (world_models.WORLD_MODELS)
    context: int = 2               # past frames (and states) the model conditions on
    rollout_steps: int = 3         # open-loop steps per training window (multi-step loss)
    ensemble: int = 5              # reward/success heads whose disagreement is the score variance
    variance: str = "epistemic"    # epistemic (head disagreement) | total (+ mean Bernoulli variance p(1-p))
    success_threshold: float = 0.5  # terminate an imagined episode when the success probability exceeds this
    image_keys: list[str] = field(default_factory=list)  # camera keys, stacked along channels in this order
    image_size: int = 0            # height = width, pixels (run time)
    state_dim: int = 0             # proprioceptive state size (run time)
    action_dim: int = 0            # action size (run time)

    @property
    def image_channels(self) -> int:
        """Image channels the model sees: 3 per camera."""
        return 3 * len(self.image_keys)

    def check_shapes(self) -> None:
        """Raise ValueError when a run-time shape was never filled in."""
        missing = [k for k in ("image_size", "state_dim", "action_dim") if getattr(self, k) <= 0]
        if missing or not self.image_keys:
            raise ValueError(f"{type(self).__name__} needs its shapes from the environment; unset: "
                             f"{missing + ([] if self.image_keys else ['image_keys'])}")
        if self.variance not in ("epistemic", "total"):
            raise ValueError(f"variance must be 'epistemic' or 'total', got {self.variance!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


@dataclass
class StepOutput:
    """One predicted step. Shapes: frame (B, C, H, W) in [0, 1]; state (B, D); the rest (B,)."""

    frame: torch.Tensor
    state: torch.Tensor
    reward: torch.Tensor
    success_prob: torch.Tensor
    score_var: torch.Tensor
    success_logit: torch.Tensor | None = None  # (B, E) per ensemble member, for losses
    reward_members: torch.Tensor | None = None  # (B, E)


@dataclass
class Prediction:
    """An open-loop rollout. Shapes: frames (B, K, C, H, W); states (B, K, D); the rest (B, K)."""

    frames: torch.Tensor
    states: torch.Tensor
    reward: torch.Tensor
    success_prob: torch.Tensor
    score_var: torch.Tensor


class EnsembleHeads(nn.Module):
    """``members`` independent MLPs mapping features to (reward, success logit), evaluated as one batched op.

    Args:
        in_dim: feature size.
        members: ensemble size (>= 1).
        hidden: hidden width of each member.
    """

    def __init__(self, in_dim: int, members: int, hidden: int = 64):
        super().__init__()
        self.members = members
        # Grouped 1x1 convolutions run every member at once instead of a Python loop over heads.
        self.net = nn.Sequential(
            nn.Conv1d(in_dim * members, hidden * members, 1, groups=members), nn.SiLU(),
            nn.Conv1d(hidden * members, 2 * members, 1, groups=members))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, F) -> reward (B, E), success logit (B, E)."""
        x = features.repeat(1, self.members).unsqueeze(-1)  # (B, E * F, 1)
        out = self.net(x).view(-1, self.members, 2)
        return out[..., 0], out[..., 1]


def summarise_heads(reward: torch.Tensor, logit: torch.Tensor, variance: str) -> tuple[torch.Tensor, ...]:
    """Ensemble mean reward, mean success probability and score variance, each (B,), from (B, E) member outputs."""
    probs = torch.sigmoid(logit)
    var = probs.var(dim=1, unbiased=False)
    if variance == "total":
        var = var + (probs * (1 - probs)).mean(dim=1)
    return reward.mean(dim=1), probs.mean(dim=1), var


def head_losses(reward: torch.Tensor, logit: torch.Tensor, target_reward: torch.Tensor, target_success: torch.Tensor,
                mask: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Bootstrapped ensemble losses: each member trains on its own random half of the valid samples.

    Args:
        reward, logit: (N, E) member outputs.
        target_reward, target_success: (N,) targets.
        mask: (N,) 1 where the sample is real (not padding past an episode's end).

    Returns:
        (reward MSE, success BCE), each averaged over members and their samples.
    """
    keep = (torch.rand(logit.shape, generator=generator, device=logit.device) < 0.5).float() * mask[:, None]
    keep[:, 0] = mask  # member 0 sees every sample, so one head is never starved on a small batch
    denom = keep.sum().clamp_min(1.0)
    bce = F.binary_cross_entropy_with_logits(logit, target_success[:, None].expand_as(logit), reduction="none")
    mse = (reward - target_reward[:, None]) ** 2
    return (mse * keep).sum() / denom, (bce * keep).sum() / denom


class WorldModel(nn.Module, abc.ABC):
    """Abstract action-conditioned video world model.

    Subclasses implement :meth:`step` (one step, no gradient bookkeeping needed) and :meth:`loss`. :meth:`predict`
    rolls :meth:`step` out open-loop over an action sequence, sliding the context window over its own predictions.

    Normalisation: states are standardised with ``state_mean`` / ``state_std`` buffers (set from the training data by
    :meth:`set_state_stats`), so they travel inside the checkpoint.
    """

    config_class: type[WorldModelConfig] = WorldModelConfig

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        cfg.check_shapes()
        self.cfg = cfg
        self.register_buffer("state_mean", torch.zeros(cfg.state_dim))
        self.register_buffer("state_std", torch.ones(cfg.state_dim))

    # -- normalisation ------------------------------------------------------------------------------------------ #
    def set_state_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Standardise states with these statistics (from the training data)."""
        self.state_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.state_std.copy_(torch.as_tensor(std, dtype=torch.float32).clamp_min(1e-3))

    def norm_state(self, s: torch.Tensor) -> torch.Tensor:
        return (s - self.state_mean) / self.state_std

    def denorm_state(self, s: torch.Tensor) -> torch.Tensor:
        return s * self.state_std + self.state_mean

    # -- the contract ------------------------------------------------------------------------------------------- #
    @abc.abstractmethod
    def step(self, frames: torch.Tensor, states: torch.Tensor, action: torch.Tensor,
             generator: torch.Generator | None = None) -> StepOutput:
        """Predict one step ahead.

        Args:
            frames: (B, T, C, H, W) the last ``context`` frames in [0, 1], oldest first.
            states: (B, T, D) the matching proprioceptive states.
            action: (B, A) the action taken at the last frame.
            generator: random source for stochastic models (diffusion sampling); deterministic models ignore it.

        Returns:
            :class:`StepOutput` for the next time step.
        """

    @abc.abstractmethod
    def loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
             ) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss on a batch of windows.

        Args:
            batch: ``frames`` (B, T + K, C, H, W) in [0, 1] (first T are context), ``states`` (B, T + K, D),
                ``actions`` (B, K, A), ``reward`` (B, K), ``success`` (B, K) (of the step that follows action k),
                ``step_mask`` (B, K) (1 where step k is inside the episode), ``frame_mask`` (B, K) (1 where the frame
                after step k was recorded; the frame after an episode's last action never is).
            generator: random source for noise and bootstrap masks.

        Returns:
            (scalar loss, metrics dict of floats).
        """

    def predict(self, frames: torch.Tensor, states: torch.Tensor, actions: torch.Tensor,
                generator: torch.Generator | None = None) -> Prediction:
        """Open-loop rollout over an action sequence.

        Args:
            frames: (B, T, C, H, W) context frames in [0, 1]; states: (B, T, D); actions: (B, K, A).

        Returns:
            :class:`Prediction` over the K steps that follow.
        """
        outs = []
        for k in range(actions.shape[1]):
            out = self.step(frames, states, actions[:, k], generator=generator)
            outs.append(out)
            frames = torch.cat([frames[:, 1:], out.frame[:, None]], dim=1)
            states = torch.cat([states[:, 1:], out.state[:, None]], dim=1)
        return Prediction(*(torch.stack([getattr(o, name) for o in outs], dim=1)
                            for name in ("frame", "state", "reward", "success_prob", "score_var")))

    # -- persistence -------------------------------------------------------------------------------------------- #
    def save(self, directory: str | Path) -> Path:
        """Write ``model.safetensors`` and ``config.json`` into ``directory`` atomically (tmp files + os.replace)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        tmp = directory / "model.safetensors.tmp"
        save_file(tensors, str(tmp))
        tmp.replace(directory / "model.safetensors")
        tmp = directory / "config.json.tmp"
        tmp.write_text(self.cfg.to_json())
        tmp.replace(directory / "config.json")
        return directory

    def load_weights(self, directory: str | Path) -> None:
        """Load ``model.safetensors`` from ``directory`` into this model.

        Raises:
            ValueError: the checkpoint belongs to a different model or shapes (names the differences).
        """
        from safetensors.torch import load_file

        directory = Path(directory)
        saved = json.loads((directory / "config.json").read_text())
        if saved.get("name") != self.cfg.name:
            raise ValueError(f"checkpoint {directory} holds world model {saved.get('name')!r}, "
                             f"cannot load it into {self.cfg.name!r}")
        tensors = load_file(str(directory / "model.safetensors"))
        own = self.state_dict()
        missing = sorted(set(own) - set(tensors))
        unexpected = sorted(set(tensors) - set(own))
        wrong = [f"{k}: checkpoint {tuple(tensors[k].shape)} vs model {tuple(v.shape)}"
                 for k, v in own.items() if k in tensors and tensors[k].shape != v.shape]
        if missing or unexpected or wrong:
            raise ValueError(f"checkpoint {directory} does not fit this {type(self).__name__}: "
                             f"missing {missing[:5]}, unexpected {unexpected[:5]}, shape mismatches {wrong[:5]}")
        self.load_state_dict(tensors)


def config_fields(cls: type) -> list[str]:
    """Names of a config dataclass's fields (for error messages)."""
    return [f.name for f in fields(cls)]
