"""Configuration of TinyVLA, the default CPU-sized vision-language-action policy (see ``modeling_tiny_vla``).

Registered with LeRobot's policy registry as ``tiny_vla``, so ``PreTrainedConfig.from_pretrained(dir)`` and
``lerobot.policies.factory.get_policy_class("tiny_vla")`` find it once ``vla_wmrl.policies`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs import NormalizationMode, PreTrainedConfig
from lerobot.optim import AdamWConfig


@PreTrainedConfig.register_subclass("tiny_vla")
@dataclass
class TinyVLAConfig(PreTrainedConfig):
    """TinyVLA hyper-parameters. Shapes (``input_features``/``output_features``) come from the dataset at build time.

    Args:
        conv_channels: output channels of the image CNN's conv layers (each but the last halves the resolution).
        image_embed_dim: per-camera image embedding size.
        text_byte_dim: embedding size of one instruction byte.
        text_hidden_dim: GRU hidden size = instruction embedding size.
        max_instruction_bytes: instructions are cut to this many UTF-8 bytes.
        film: condition every CNN block on the instruction (FiLM) instead of only concatenating the embeddings.
        hidden_dim: width of the action head MLP.
        num_hidden_layers: depth of the action head MLP.
        init_log_std: initial log standard deviation of the pre-tanh Gaussian.
        log_std_min: lower clamp of the log standard deviation.
        log_std_max: upper clamp of the log standard deviation.
        crop_pad: random-shift augmentation in training, in pixels (0 disables).
        std_loss_weight: weight of the negative log-likelihood term that fits the standard deviation in ``forward``.
        std_fit_action_clip: demonstrated actions are clipped to +-this for that term (atanh(+-1) is infinite).
        entropy_samples: Monte-Carlo samples for the tanh-Jacobian part of ``entropy``.
        action_low: per-dimension lower end of the action range the squashed Gaussian is mapped onto; None = -1
            (a simulator's normalised action box). Real arms act in joint units: ``sim=none`` training sets it to
            the dataset's recorded minimum.
        action_high: the upper end; None = +1.
        optimizer_lr: AdamW learning rate (LeRobot optimizer preset).
        optimizer_weight_decay: AdamW weight decay.
        optimizer_grad_clip_norm: gradient-norm clip.
    """

    conv_channels: list[int] = field(default_factory=lambda: [32, 64, 128, 128])
    image_embed_dim: int = 256
    text_byte_dim: int = 32
    text_hidden_dim: int = 128
    max_instruction_bytes: int = 128
    film: bool = True
    hidden_dim: int = 256
    num_hidden_layers: int = 2
    init_log_std: float = -1.0
    log_std_min: float = -5.0
    log_std_max: float = 1.0
    crop_pad: int = 4
    std_loss_weight: float = 0.05
    std_fit_action_clip: float = 0.97
    entropy_samples: int = 16
    action_low: list[float] | None = None
    action_high: list[float] | None = None

    optimizer_lr: float = 3e-4
    optimizer_weight_decay: float = 1e-4
    optimizer_grad_clip_norm: float = 10.0

    # The policy normalises the state itself (statistics live in its weights, so an RL trainer needs no processor);
    # LeRobot's processors therefore pass everything through unchanged.
    normalization_mapping: dict[str, NormalizationMode] = field(
        default_factory=lambda: {"VISUAL": NormalizationMode.IDENTITY, "STATE": NormalizationMode.IDENTITY,
                                 "ACTION": NormalizationMode.IDENTITY})

    def __post_init__(self):
        super().__post_init__()
        if self.log_std_min >= self.log_std_max:
            raise ValueError(f"log_std_min ({self.log_std_min}) must be below log_std_max ({self.log_std_max})")
        if not self.conv_channels:
            raise ValueError("conv_channels needs at least one layer")
        if (self.action_low is None) != (self.action_high is None):
            raise ValueError("set both action_low and action_high, or neither")
        if self.action_low is not None and any(lo > hi for lo, hi in zip(self.action_low, self.action_high)):
            raise ValueError(f"action_low {self.action_low} exceeds action_high {self.action_high}")

    def get_optimizer_preset(self) -> AdamWConfig:
        return AdamWConfig(lr=self.optimizer_lr, weight_decay=self.optimizer_weight_decay,
                           grad_clip_norm=self.optimizer_grad_clip_norm)

    def get_scheduler_preset(self):
        return None

    def validate_features(self) -> None:
        if not self.image_features:
            raise ValueError("TinyVLA needs at least one image input (observation.images.<camera>)")
        if self.action_feature is None:
            raise ValueError("TinyVLA needs an 'action' output feature")
        shapes = {tuple(ft.shape) for ft in self.image_features.values()}
        if len(shapes) != 1:
            raise ValueError(f"all cameras must share one image shape (C, H, W); got {sorted(shapes)}")

    @property
    def state_dim(self) -> int:
        """Size of ``observation.state`` (0 when the policy takes no state)."""
        ft = self.robot_state_feature
        return int(ft.shape[0]) if ft is not None else 0

    @property
    def action_dim(self) -> int:
        """Size of the action vector."""
        return int(self.action_feature.shape[0])

    @property
    def action_range(self) -> tuple[list[float], list[float]]:
        """(low, high) of the actions, per dimension."""
        a = self.action_dim
        if self.action_low is None:
            return [-1.0] * a, [1.0] * a
        if len(self.action_low) != a or len(self.action_high) != a:
            raise ValueError(f"action_low/action_high have {len(self.action_low)}/{len(self.action_high)} entries "
                             f"but the action has {a} dimensions")
        return list(map(float, self.action_low)), list(map(float, self.action_high))

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> None:
        return None

    @property
    def reward_delta_indices(self) -> None:
        return None

