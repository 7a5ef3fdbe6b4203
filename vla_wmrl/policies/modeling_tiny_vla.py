"""TinyVLA: a small language-conditioned visuomotor policy that trains and runs on CPUs.

    image(s) --CNN--> (B, E) per camera --+
    instruction bytes --GRU--> (B, T) ----+--> MLP --> mean (B, A) of a Gaussian over pre-tanh actions u
    state --(x - mean) / std--> (B, D) ---+            log_std (A,) learned, state-independent

    action a = c + h * tanh(u): the env's [-1, 1] box (c = 0, h = 1), or a real arm's range in joint units
    (``config.action_low``/``action_high``; the policy works in the normalised [-1, 1] space inside).

The instruction encoder is tokenizer-free (UTF-8 bytes -> embedding -> GRU) and trained end-to-end, so it needs no
downloaded weights; embeddings are computed once per distinct instruction in a batch, and cached in inference.
State statistics come from the dataset and live in the weights (buffers), so a checkpoint is self-contained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lerobot.policies.pretrained import PreTrainedPolicy
from lerobot.utils.constants import ACTION, OBS_STATE
from torch import Tensor, nn

from vla_wmrl.policies.base import ENCODER_PARTS, TASK, StochasticPolicy, features_key, validate_batch
from vla_wmrl.policies.configuration_tiny_vla import TinyVLAConfig

_MEAN_BOUND = 4.0  # |pre-tanh mean| stays below this: tanh(4) = 0.9993, invertible in float32
_ACTION_EPS = 1e-6  # keeps atanh finite for actions on the box edge (experts often command exactly +-1)
_LOG2 = math.log(2.0)


class ImageEncoder(nn.Module):
    """Small strided CNN: (B, 3, H, W) in [0, 1] -> (B, embed_dim), optionally FiLM-conditioned on the instruction.

    With FiLM every conv block's normalised features are scaled and shifted per channel by the instruction
    embedding, so the instruction decides what the CNN looks for (RT-1's FiLM-EfficientNet idea); without it, an
    MLP on concatenated features must learn that gating itself, which behaviour cloning on a few demonstrations
    does poorly.
    """

    def __init__(self, shape: tuple[int, int, int], channels: list[int], embed_dim: int, film_dim: int = 0):
        super().__init__()
        self.convs, self.norms, self.films = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        c_in = shape[0]
        for i, c_out in enumerate(channels):
            stride = 2 if i < len(channels) - 1 else 1  # the last layer keeps the resolution for spatial detail
            self.convs.append(nn.Conv2d(c_in, c_out, 3, stride, 1))
            self.norms.append(nn.GroupNorm(8 if c_out % 8 == 0 else 1, c_out))
            if film_dim:
                film = nn.Linear(film_dim, 2 * c_out)
                nn.init.zeros_(film.weight)  # start as the identity modulation
                nn.init.zeros_(film.bias)
                self.films.append(film)
            c_in = c_out
        with torch.no_grad():
            self.backbone_dim = self.backbone(torch.zeros(1, *shape), None).numel()
        self.proj = nn.Sequential(nn.Flatten(), nn.Linear(self.backbone_dim, embed_dim), nn.LayerNorm(embed_dim),
                                  nn.ReLU())

    def backbone(self, images: Tensor, cond: Tensor | None) -> Tensor:
        """The conv blocks' feature maps (B, C, h, w), before the projection."""
        x = images - 0.5
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x))
            if self.films and cond is not None:
                gamma, beta = self.films[i](cond).unsqueeze(-1).unsqueeze(-1).chunk(2, dim=1)
                x = x * (1 + gamma) + beta
            x = F.relu(x)
        return x

    def forward(self, images: Tensor, cond: Tensor | None = None) -> Tensor:
        """``cond`` (B, film_dim): the instruction embedding used for FiLM (ignored without FiLM)."""
        return self.proj(self.backbone(images, cond))


class InstructionEncoder(nn.Module):
    """Tokenizer-free instruction encoder: UTF-8 bytes -> byte embedding -> GRU -> last hidden state."""

    def __init__(self, byte_dim: int, hidden_dim: int, max_bytes: int):
        super().__init__()
        self.max_bytes = max_bytes
        self.embed = nn.Embedding(257, byte_dim, padding_idx=0)  # 0 = padding, byte b -> b + 1
        self.gru = nn.GRU(byte_dim, hidden_dim, batch_first=True)

    def forward(self, texts: list[str]) -> Tensor:
        encoded = [list(t.lower().encode("utf-8")[: self.max_bytes]) or [0] for t in texts]
        lengths = torch.tensor([len(e) for e in encoded])
        ids = torch.zeros(len(encoded), int(lengths.max()), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = torch.tensor(e) + 1
        ids = ids.to(self.embed.weight.device)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return h[-1]  # (N, hidden_dim)


class TinyVLAPolicy(PreTrainedPolicy, StochasticPolicy):
    """Image + instruction + state -> tanh-squashed Gaussian over actions (see the module docstring).

    Args:
        config: a :class:`TinyVLAConfig` with ``input_features`` / ``output_features`` set.
        dataset_stats: LeRobot dataset statistics (``ds.meta.stats``); the state's mean/std are stored in the
            weights. ``None`` when loading a checkpoint (the stored values are restored).
    """

    config_class = TinyVLAConfig
    name = "tiny_vla"

    def __init__(self, config: TinyVLAConfig, dataset_stats: dict | None = None, **kwargs):
        super().__init__(config)
        config.validate_features()
        self.config = config
        self.image_keys = sorted(config.image_features)
        image_shape = tuple(config.image_features[self.image_keys[0]].shape)
        self.image_encoder = ImageEncoder(image_shape, list(config.conv_channels), config.image_embed_dim,
                                          film_dim=config.text_hidden_dim if config.film else 0)
        self.text_encoder = InstructionEncoder(config.text_byte_dim, config.text_hidden_dim,
                                               config.max_instruction_bytes)
        d, a = config.state_dim, config.action_dim
        self.register_buffer("state_mean", torch.zeros(d))
        self.register_buffer("state_std", torch.ones(d))
        if dataset_stats is not None and d:
            stats = dataset_stats[OBS_STATE]
            self.state_mean.copy_(torch.as_tensor(stats["mean"], dtype=torch.float32).reshape(d))
            # Near-constant state dimensions must not blow up: floor the std.
            self.state_std.copy_(torch.as_tensor(stats["std"], dtype=torch.float32).reshape(d).clamp_min(1e-3))
        width = len(self.image_keys) * config.image_embed_dim + config.text_hidden_dim + d
        layers = []
        for _ in range(config.num_hidden_layers):
            layers += [nn.Linear(width, config.hidden_dim), nn.ReLU()]
            width = config.hidden_dim
        self.trunk = nn.Sequential(*layers)
        self.mean_head = nn.Linear(width, a)
        self.log_std = nn.Parameter(torch.full((a,), float(config.init_log_std)))
        low, high = (torch.tensor(v, dtype=torch.float32) for v in config.action_range)
        self.register_buffer("action_center", (high + low) / 2, persistent=False)
        self.register_buffer("action_half", ((high - low) / 2).clamp_min(1e-6), persistent=False)
        self._text_cache: dict[str, Tensor] = {}

    # ---------------------------------------------------------------- LeRobot's PreTrainedPolicy interface ------ #
    @classmethod
    def _load_as_safetensor(cls, model, model_file: str, map_location: str, strict: bool):
        # LeRobot loads non-strictly by default, which would leave a mismatched layer silently random: refuse.
        return super()._load_as_safetensor(model, model_file, map_location, strict=True)

    def get_optim_params(self) -> dict:
        return self.parameters()

    def reset(self):
        """No per-episode state (no action queue, no observation history)."""

    def train(self, mode: bool = True):
        self._text_cache.clear()  # cached instruction embeddings go stale as soon as weights may change
        return super().train(mode)

    @torch.no_grad()
    def predict_action_chunk(self, batch: dict, **kwargs) -> Tensor:
        """A chunk of one action (B, 1, A): TinyVLA does not chunk."""
        return self.select_action(batch, **kwargs).unsqueeze(1)

    @torch.no_grad()
    def select_action(self, batch: dict, deterministic: bool = False,
                      generator: torch.Generator | Sequence[torch.Generator] | None = None, **kwargs) -> Tensor:
        """Actions (B, A) in the action range: ``tanh(mean)`` if ``deterministic``, else
        ``tanh(mean + std * noise)``, mapped from [-1, 1] onto the range. ``generator``: one for the batch, or one
        per row (each row's noise then depends on its generator alone)."""
        mean, log_std = self._distribution(batch)
        if deterministic:
            return self._unnormalize(torch.tanh(mean))
        return self._draw(mean, log_std, generator)

    @torch.no_grad()
    def sample(self, batch: dict, generator: torch.Generator | Sequence[torch.Generator] | None = None
               ) -> tuple[Tensor, Tensor]:
        """``select_action``'s sample and its ``log_prob``, from one forward pass. The log-probability is taken of the
        returned action (not of the pre-tanh draw), exactly as ``log_prob`` will score it."""
        mean, log_std = self._distribution(batch)
        actions = self._draw(mean, log_std, generator)
        return actions, self._action_log_prob(mean, log_std, actions)

    def _draw(self, mean: Tensor, log_std: Tensor, generator) -> Tensor:
        if isinstance(generator, Sequence):
            if len(generator) != len(mean):
                raise ValueError(f"select_action: {len(generator)} generators for a batch of {len(mean)}")
            noise = torch.stack([torch.randn(mean.shape[1:], generator=g, device=mean.device) for g in generator])
        else:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        return self._unnormalize(torch.tanh(mean + log_std.exp() * noise))

    # ----------------------------------------------------------------------------- StochasticPolicy ------------- #
    def log_prob(self, batch: dict, actions: Tensor) -> Tensor:
        """log p(a) = log N(atanh x; mean, std) - sum log(1 - x^2) - sum log h, with x = (a - c) / h the action
        in [-1, 1], summed over action dimensions -> (B,)."""
        mean, log_std = self._distribution(batch)
        return self._action_log_prob(mean, log_std, actions)

    def _action_log_prob(self, mean: Tensor, log_std: Tensor, actions: Tensor) -> Tensor:
        return self._log_prob(mean, log_std, self._normalize(actions)) - self.action_half.log().sum()

    def entropy(self, batch: dict) -> Tensor:
        """H(a) = H(u) + E[sum log(1 - tanh(u)^2)] + sum log h: the Gaussian part exactly, the Jacobian part by Monte Carlo
        (``config.entropy_samples`` reparameterised samples, so it is differentiable) -> (B,)."""
        mean, log_std = self._distribution(batch)
        gauss = (0.5 * math.log(2 * math.pi * math.e) + log_std).sum(-1).expand(mean.shape[0])
        u = mean.unsqueeze(0) + log_std.exp() * torch.randn(self.config.entropy_samples, *mean.shape,
                                                             device=mean.device)
        return gauss + _log_one_minus_tanh_sq(u).sum(-1).mean(0) + self.action_half.log().sum()

    def forward(self, batch: dict) -> tuple[Tensor, dict]:
        """Behaviour-cloning loss: MSE between ``tanh(mean)`` and the demonstrated action, plus a small
        negative log-likelihood with the mean detached, which fits only the standard deviation (the exploration
        noise RL starts from) and leaves the mean to the MSE."""
        if ACTION not in batch:
            raise KeyError(f"a training batch needs {ACTION!r}; received {sorted(batch)}")
        actions = batch[ACTION]
        if self.training and self.config.crop_pad > 0:
            batch = {**batch, **{k: random_shift(batch[k], self.config.crop_pad) for k in self.image_keys}}
        mean, log_std = self._distribution(batch)
        if actions.shape != mean.shape:
            raise ValueError(f"'action' must have shape {tuple(mean.shape)}, received {tuple(actions.shape)}")
        actions = self._normalize(actions)  # the loss lives in the normalised [-1, 1] space
        mse = F.mse_loss(torch.tanh(mean), actions)
        # Experts often command exactly +-1; atanh of that is huge and would inflate the fitted std, so the
        # standard deviation is fitted to actions clipped slightly inside the box.
        clip = self.config.std_fit_action_clip
        nll = -self._log_prob(mean.detach(), log_std, actions.clamp(-clip, clip)).mean() / actions.shape[-1]
        loss = mse + self.config.std_loss_weight * nll
        return loss, {"mse": mse.item(), "nll": nll.item(), "std": log_std.exp().mean().item()}

    def encode(self, batch: dict, part: str = "encoder") -> Tensor:
        """(B, F): the image embeddings (FiLM-conditioned), the instruction embedding and the normalised state,
        concatenated; the action head (trunk, mean head, log_std) reads nothing else. ``part="backbone"``: the
        conv feature maps, flattened, in place of the image embeddings (the image projection is then left to run)."""
        _check_part(part)
        validate_batch(self.config.input_features, batch)
        text = self._encode_instructions(batch[TASK])
        if part == "backbone":
            features = [self.image_encoder.backbone(batch[k], text).flatten(1) for k in self.image_keys]
        else:
            features = [self.image_encoder(batch[k], text) for k in self.image_keys]
        features.append(text)
        if self.config.state_dim:
            features.append((batch[OBS_STATE] - self.state_mean) / self.state_std)
        return torch.cat(features, dim=-1)

    def encoder_parameters(self, part: str = "encoder") -> list[nn.Parameter]:
        """``encoder``: the image encoder with its FiLM layers, and the instruction GRU; ``backbone``: the same
        without the image projection."""
        _check_part(part)
        image = [p for n, p in self.image_encoder.named_parameters() if part == "encoder" or not n.startswith("proj.")]
        return [*image, *self.text_encoder.parameters()]

    # ----------------------------------------------------------------------------------------- internals -------- #
    def _distribution(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Pre-tanh Gaussian: mean (B, A) and clamped log_std (A,), from the observations or their encoded
        features (``encode``)."""
        if features_key("encoder") in batch:
            features = batch[features_key("encoder")]
        elif features_key("backbone") in batch:  # project each camera's feature maps; text and state pass through
            maps = batch[features_key("backbone")]
            n = len(self.image_keys) * self.image_encoder.backbone_dim
            images = maps[:, :n].split(self.image_encoder.backbone_dim, dim=1)
            features = torch.cat([*(self.image_encoder.proj(x) for x in images), maps[:, n:]], dim=-1)
        else:
            features = self.encode(batch)
        # Soft-bound the pre-tanh mean: beyond ~|u| = 9, float32 tanh rounds to exactly 1, atanh cannot recover the
        # sample, and RL log-probabilities (hence PPO ratios and gradients) explode.
        # The action head runs in float32 even under autocast (algo.precision=bf16 autocasts only the encoder): a bf16
        # mean (8-bit mantissa) errs by ~0.5% of |mean|, and at exploration std 0.1 the log-probability's slope is
        # ~10 per unit of mean and action dimension, so PPO ratios would carry that error.
        with torch.autocast(device_type=features.device.type, enabled=False):
            mean = _MEAN_BOUND * torch.tanh(self.mean_head(self.trunk(features.float())) / _MEAN_BOUND)
        log_std = self.log_std.clamp(self.config.log_std_min, self.config.log_std_max)
        return mean, log_std

    def _encode_instructions(self, tasks: list[str]) -> Tensor:
        """(B, text_hidden_dim): the GRU runs once per distinct instruction (usually one or two per batch)."""
        unique = sorted(set(tasks))
        cache = not self.training and not torch.is_grad_enabled()
        todo = [t for t in unique if t not in self._text_cache] if cache else unique
        fresh = dict(zip(todo, self.text_encoder(todo))) if todo else {}
        if cache:
            self._text_cache.update(fresh)
            fresh = self._text_cache
        table = torch.stack([fresh[t] for t in unique])
        index = torch.tensor([unique.index(t) for t in tasks], device=table.device)
        # A one-hot product, not ``table[index]``: indexing's backward accumulates the B rows into ``table`` with
        # atomic adds on CPU threads, in a different order each time, so the same update gave different weights
        # (~1e-5 relative) and runs did not repeat. The product's forward is exact and its backward deterministic.
        return F.one_hot(index, len(unique)).to(table.dtype) @ table

    def _normalize(self, actions: Tensor) -> Tensor:
        return (actions - self.action_center) / self.action_half

    def _unnormalize(self, x: Tensor) -> Tensor:
        return self.action_center + self.action_half * x

    @staticmethod
    def _log_prob(mean: Tensor, log_std: Tensor, actions: Tensor) -> Tensor:
        u = torch.atanh(actions.clamp(-1 + _ACTION_EPS, 1 - _ACTION_EPS))
        gauss = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
        return (gauss - _log_one_minus_tanh_sq(u)).sum(-1)


def _check_part(part: str):
    if part not in ENCODER_PARTS:
        raise ValueError(f"TinyVLA splits at one of {list(ENCODER_PARTS)}, not {part!r}")


def random_shift(images: Tensor, pad: int) -> Tensor:
    """Shift each image by up to ``pad`` pixels (edge-replicated): the augmentation that makes behaviour cloning
    from a few dozen demonstrations generalise (DrQ, RAD)."""
    b, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    dx, dy = torch.randint(0, 2 * pad + 1, (2, b)).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(b)])


def _log_one_minus_tanh_sq(u: Tensor) -> Tensor:
    """log(1 - tanh(u)^2), computed stably as 2 * (log 2 - u - softplus(-2u))."""
    return 2.0 * (_LOG2 - u - F.softplus(-2.0 * u))
