"""The default world model: a small action-conditioned conv U-Net, fast on CPUs.

It sees the last ``context`` frames stacked along channels, and the action and proprioceptive states through FiLM
(per-channel scale and shift in every block). It predicts the next frame as a residual on the last one (the output
layer starts at zero, so an untrained model copies the last frame), the next state as a residual on the last state,
and reward/success from an ensemble of small heads on the pooled bottleneck (see ``world_models.base`` for what the
ensemble's variance means).

Speed: the input is folded into a lower resolution first (``stem`` x ``stem`` pixels per position, space-to-depth)
and unfolded at the end, so every convolution runs at 1/stem of the image size or less.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from world_models.base import (ACTIONS, FRAME_MASK, FRAMES, REWARD, STATES, STEP_MASK, SUCCESS, EnsembleHeads,
                               StepOutput, WorldModel, WorldModelConfig, head_losses, summarise_heads)


@dataclass
class ConvConfig(WorldModelConfig):
    """Conv U-Net world model."""

    name: str = "conv"
    channels: list[int] = field(default_factory=lambda: [32, 64, 128])  # widths per U-Net level, finest first
    stem: int = 4                  # space-to-depth factor before the first convolution (2: sharper, ~3x slower)
    cond_dim: int = 128            # width of the action/state conditioning vector
    head_hidden: int = 64          # hidden width of each reward/success head
    frame_weight: float = 20.0     # weight of the frame MSE (pixels in [0, 1]) against the other losses
    state_weight: float = 1.0      # weight of the standardised next-state MSE
    success_weight: float = 1.0    # weight of the success BCE
    reward_weight: float = 1.0     # weight of the reward MSE


class _FiLMBlock(nn.Module):
    """conv 3x3 -> GroupNorm -> FiLM(cond) -> SiLU, with a residual connection."""

    def __init__(self, ch: int, cond_dim: int):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)
        self.norm = nn.GroupNorm(min(8, ch), ch)
        self.film = nn.Linear(cond_dim, 2 * ch)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond)[:, :, None, None].chunk(2, dim=1)
        return x + F.silu(self.norm(self.conv(x)) * (1 + scale) + shift)


class ConvWorldModel(WorldModel):
    """Conv U-Net next-frame predictor with state, reward and success heads (see module docstring)."""

    config_class = ConvConfig

    def __init__(self, cfg: ConvConfig):
        super().__init__(cfg)
        ch, c, s = list(cfg.channels), cfg.channels, cfg.stem
        if cfg.image_size % (s * 2 ** (len(ch) - 1)):
            raise ValueError(f"image_size {cfg.image_size} must be divisible by stem * 2^(levels-1) = "
                             f"{s * 2 ** (len(ch) - 1)}")
        self.cond = nn.Sequential(nn.Linear(cfg.action_dim + cfg.context * cfg.state_dim, cfg.cond_dim), nn.SiLU(),
                                  nn.Linear(cfg.cond_dim, cfg.cond_dim))
        self.stem = nn.Conv2d(cfg.context * cfg.image_channels * s * s, c[0], 3, padding=1)
        self.enc = nn.ModuleList(_FiLMBlock(w, cfg.cond_dim) for w in ch)
        self.down = nn.ModuleList(nn.Conv2d(a, b, 3, stride=2, padding=1) for a, b in zip(ch, ch[1:]))
        self.mid = _FiLMBlock(ch[-1], cfg.cond_dim)
        self.up = nn.ModuleList(nn.ConvTranspose2d(b, a, 2, stride=2) for a, b in zip(ch, ch[1:]))
        self.dec = nn.ModuleList(_FiLMBlock(w, cfg.cond_dim) for w in ch[:-1])
        self.out = nn.Conv2d(ch[0], cfg.image_channels * s * s, 3, padding=1)
        nn.init.zeros_(self.out.weight)  # start as copy-last-frame, the baseline to beat
        nn.init.zeros_(self.out.bias)
        feat = ch[-1] + cfg.cond_dim
        self.state_head = nn.Sequential(nn.Linear(feat, cfg.head_hidden), nn.SiLU(),
                                        nn.Linear(cfg.head_hidden, cfg.state_dim))
        self.heads = EnsembleHeads(feat, cfg.ensemble, cfg.head_hidden)

    def _forward(self, frames, states, action):
        """Raw outputs: next frame (B, C, H, W), next state (B, D), member rewards and logits (B, E)."""
        cfg = self.cfg
        B = frames.shape[0]
        last = frames[:, -1]
        x = F.pixel_unshuffle(frames.flatten(1, 2) * 2 - 1, cfg.stem)  # (B, T * C * s^2, H / s, W / s)
        cond = self.cond(torch.cat([action, self.norm_state(states).reshape(B, -1)], dim=1))  # (B, cond_dim)
        x, skips = self.stem(x), []
        for i, block in enumerate(self.enc):
            x = block(x, cond)
            if i < len(self.down):
                skips.append(x)
                x = self.down[i](x)
        x = self.mid(x, cond)
        features = torch.cat([x.mean(dim=(2, 3)), cond], dim=1)  # (B, ch[-1] + cond_dim)
        for i in reversed(range(len(self.dec))):
            x = self.dec[i](self.up[i](x) + skips[i], cond)
        delta = F.pixel_shuffle(self.out(x), cfg.stem)  # (B, C, H, W)
        frame = (last + delta).clamp(0, 1)
        state = self.denorm_state(self.norm_state(states[:, -1]) + self.state_head(features))
        reward, logit = self.heads(features)
        return frame, state, reward, logit

    def step(self, frames, states, action, generator=None) -> StepOutput:
        frame, state, reward_m, logit = self._forward(frames, states, action)
        reward, prob, var = summarise_heads(reward_m, logit, self.cfg.variance)
        return StepOutput(frame, state, reward, prob, var, logit, reward_m)

    def loss(self, batch, generator=None):
        cfg, T = self.cfg, self.cfg.context
        frames, states = batch[FRAMES][:, :T], batch[STATES][:, :T]
        totals = {"frame_mse": 0.0, "state_mse": 0.0, "success_bce": 0.0, "reward_mse": 0.0}
        loss = 0.0
        K = batch[ACTIONS].shape[1]
        for k in range(K):
            frame, state, reward_m, logit = self._forward(frames, states, batch[ACTIONS][:, k])
            fm, sm = batch[FRAME_MASK][:, k], batch[STEP_MASK][:, k]
            n_f = fm.sum().clamp_min(1.0)
            frame_mse = (((frame - batch[FRAMES][:, T + k]) ** 2).mean(dim=(1, 2, 3)) * fm).sum() / n_f
            state_err = self.norm_state(state) - self.norm_state(batch[STATES][:, T + k])
            state_mse = ((state_err ** 2).mean(dim=1) * fm).sum() / n_f
            reward_mse, bce = head_losses(reward_m, logit, batch[REWARD][:, k], batch[SUCCESS][:, k], sm, generator)
            loss = loss + (cfg.frame_weight * frame_mse + cfg.state_weight * state_mse
                           + cfg.success_weight * bce + cfg.reward_weight * reward_mse) / K
            for name, v in zip(totals, (frame_mse, state_mse, bce, reward_mse)):
                totals[name] += float(v.detach()) / K
            # Feed the model its own prediction: the multi-step loss is what keeps long rollouts from drifting.
            frames = torch.cat([frames[:, 1:], frame[:, None]], dim=1)
            states = torch.cat([states[:, 1:], state[:, None]], dim=1)
        return loss, totals
