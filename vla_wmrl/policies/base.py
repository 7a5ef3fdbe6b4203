"""The policy contract every vla-wmrl policy fulfils, and the adapter that lets ``run_episodes`` drive one.

A policy is a LeRobot ``PreTrainedPolicy`` that also implements :class:`StochasticPolicy`: what behaviour cloning and
an RL trainer (GRPO/PPO) need. Batches use LeRobot's keys and layout::

    observation.images.<cam>  (B, 3, H, W) float32 in [0, 1]
    observation.state         (B, D) float32
    task                      list of B instruction strings
    action                    (B, A) float32 (training batches only)

A policy that splits into an observation encoder and an action head (``encode``) also accepts, in place of the
observations, ``features`` (B, F): what its ``encode`` returned for them. An RL update that keeps the encoder frozen
(``algo.freeze_encoder``) encodes each step once and runs its epochs on the head alone. A policy may also split
earlier, at its ``backbone`` (``encode(batch, part="backbone")``, accepted as ``backbone_features``): the layers after
it (for TinyVLA the image projection) then learn with the head.

An RL update may run a policy under bfloat16 autocast (``algo.precision=bf16``); a policy should then keep its action
distribution (mean, std, log-probability) in float32, as TinyVLA runs its action head outside autocast: PPO ratios
are differences of log-probabilities, and bf16 rounding of a trained policy's mean shows up in them directly.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

TASK = "task"
ENCODER_PARTS = ("encoder", "backbone")  # where a policy may split (``encode(batch, part)``): after its whole
                                         # observation encoder, or after its backbone (the layers after it learn)


def features_key(part: str) -> str:
    """The batch key holding ``encode(batch, part)``'s output in place of the observations."""
    return "features" if part == "encoder" else f"{part}_features"


class StochasticPolicy(abc.ABC):
    """What training needs from a policy, on top of LeRobot's ``PreTrainedPolicy``.

    Subclasses inherit from both, e.g. ``class TinyVLAPolicy(PreTrainedPolicy, StochasticPolicy)``.
    """

    @abc.abstractmethod
    def select_action(self, batch: dict, deterministic: bool = False,
                      generator: torch.Generator | Sequence[torch.Generator] | None = None) -> torch.Tensor:
        """Actions (B, A) for a batch of observations: sampled (noise from ``generator``: one for the batch, one per
        row, or torch's global one when None), or the distribution's central action."""

    def sample(self, batch: dict, generator: torch.Generator | Sequence[torch.Generator] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions (B, A), as ``select_action`` draws them, and their log-probabilities (B,), as ``log_prob``
        scores them. The rollout then carries the log-probabilities the RL update's ratio starts from, and the update
        need not recompute them. This default takes two forward passes; a policy overrides it to take one."""
        with torch.no_grad():
            actions = self.select_action(batch, generator=generator)
            return actions, self.log_prob(batch, actions)

    @abc.abstractmethod
    def log_prob(self, batch: dict, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability density (B,) of ``actions`` (B, A) under the policy; differentiable."""

    @abc.abstractmethod
    def entropy(self, batch: dict) -> torch.Tensor:
        """Entropy (B,) of the action distribution (may be a Monte-Carlo estimate); differentiable."""

    @abc.abstractmethod
    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """Supervised (behaviour-cloning) loss on a batch that holds ``action``, and logging-friendly metrics."""

    def encode(self, batch: dict, part: str = "encoder") -> torch.Tensor:
        """Features (B, F) of a batch's observations: with ``part="encoder"`` everything the action head reads, with
        ``"backbone"`` an earlier layer's output (what the rest of the encoder reads). A batch holding them under
        ``features_key(part)`` (and no observations) then gives the same ``log_prob`` and ``entropy``. Optional: a
        policy that does not split there raises ``NotImplementedError``."""
        raise NotImplementedError(f"policy {type(self).__name__} does not split at its {part} (no encode()); set "
                                  f"algo.freeze_encoder=false")

    def encoder_parameters(self, part: str = "encoder") -> list[torch.nn.Parameter]:
        """The parameters ``encode(batch, part)`` depends on (and nothing after it): what ``algo.freeze_encoder``
        holds fixed."""
        raise NotImplementedError(f"policy {type(self).__name__} does not split at its {part} (no "
                                  f"encoder_parameters()); set algo.freeze_encoder=false")


# --------------------------------------------------------------------------------------------------------------- #
def features_from_dataset(meta_features: dict) -> tuple[dict[str, PolicyFeature], dict[str, PolicyFeature]]:
    """Policy input and output features from a LeRobotDataset's ``meta.features`` (images become (C, H, W))."""
    inputs, outputs = {}, {}
    for key, ft in meta_features.items():
        if key.startswith(f"{OBS_IMAGES}."):
            h, w, c = ft["shape"]
            inputs[key] = PolicyFeature(FeatureType.VISUAL, (c, h, w))
        elif key == OBS_STATE:
            inputs[key] = PolicyFeature(FeatureType.STATE, tuple(ft["shape"]))
        elif key == ACTION:
            outputs[key] = PolicyFeature(FeatureType.ACTION, tuple(ft["shape"]))
    return inputs, outputs


def validate_batch(input_features: dict[str, PolicyFeature], batch: dict) -> int:
    """Check a batch against the policy's input features and return the batch size.

    Raises:
        KeyError: an expected observation key is missing (the message lists the expected and received keys).
        ValueError: a shape does not match, or ``task`` is not one string per sample.
    """
    missing = [k for k in input_features if k not in batch]
    if missing or TASK not in batch:
        expected = sorted([*input_features, TASK])
        raise KeyError(f"observation keys do not match the policy's config: expected {expected}, "
                       f"received {sorted(batch)} (missing {sorted([*missing] + ([TASK] if TASK not in batch else []))})")
    sizes = set()
    for key, ft in input_features.items():
        value = batch[key]
        if not isinstance(value, torch.Tensor) or value.ndim != len(ft.shape) + 1 \
                or tuple(value.shape[1:]) != tuple(ft.shape):
            got = tuple(value.shape) if hasattr(value, "shape") else type(value).__name__
            layout = " float in [0, 1], channels first" if ft.type is FeatureType.VISUAL else ""
            raise ValueError(f"observation {key!r} does not match the policy's config: expected shape "
                             f"(B, {', '.join(map(str, ft.shape))}){layout}, received {got}")
        sizes.add(value.shape[0])
    tasks = batch[TASK]
    if isinstance(tasks, str) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"'task' must be a list of instruction strings, one per sample; received {type(tasks).__name__}")
    sizes.add(len(tasks))
    if len(sizes) != 1:
        raise ValueError(f"batch entries disagree on the batch size: {sorted(sizes)}")
    return sizes.pop()


def check_env_compat(config, observation_space, action_space, source: str = "policy") -> None:
    """Fail clearly when a policy's features do not fit an environment's spaces.

    Args:
        config: the policy's ``PreTrainedConfig`` (input/output features).
        observation_space: the env's single (not batched) ``gym.spaces.Dict`` observation space.
        action_space: the env's single ``gym.spaces.Box`` action space.
        source: where the policy came from (a checkpoint path), for the message.

    Raises:
        ValueError: action dimension, observation keys or shapes differ; the message names both sides.
    """
    want_a, got_a = tuple(config.action_feature.shape), tuple(action_space.shape)
    if want_a != got_a:
        raise ValueError(f"{source} outputs actions of shape {want_a} but the environment expects {got_a}: "
                         f"the checkpoint was trained for another robot or task")
    low, high = getattr(config, "action_range", ([-1.0] * want_a[0], [1.0] * want_a[0]))
    if not (np.allclose(action_space.low, low, rtol=1e-4, atol=1e-5)
            and np.allclose(action_space.high, high, rtol=1e-4, atol=1e-5)):
        raise ValueError(f"{source} acts in the range [{np.asarray(low)}, {np.asarray(high)}] but the environment's "
                         f"action box is [{action_space.low}, {action_space.high}]")
    env_features = {}
    for key, space in observation_space.spaces.items():
        if key.startswith(f"{OBS_IMAGES}."):
            h, w, c = space.shape
            env_features[key] = (c, h, w)
        elif key == OBS_STATE:
            env_features[key] = tuple(space.shape)
    expected = {k: tuple(ft.shape) for k, ft in config.input_features.items()}
    missing = {k: v for k, v in expected.items() if env_features.get(k) != v}
    if missing:
        raise ValueError(f"{source} expects observations {expected} (images as C, H, W) but the environment "
                         f"provides {env_features}")


def obs_to_batch(obs: dict, input_features: dict[str, PolicyFeature], device: torch.device | str = "cpu") -> dict:
    """Turn a raw batched env observation (uint8 (N, H, W, 3) images, (N, D) state, N task strings) into a policy
    batch (float (N, 3, H, W) images in [0, 1]); keys the policy does not use are dropped."""
    batch = {}
    for key in input_features:
        if key not in obs:
            raise KeyError(f"observation keys do not match the policy's config: expected {sorted(input_features)}, "
                           f"received {sorted(k for k in obs if not k.startswith('_'))}")
        value = torch.as_tensor(np.asarray(obs[key]), device=device)
        if key.startswith(f"{OBS_IMAGES}."):
            if value.ndim != 4 or value.shape[-1] != 3:
                raise ValueError(f"observation {key!r}: expected raw images (N, H, W, 3) uint8, received "
                                 f"{tuple(value.shape)} {value.dtype}")
            value = value.permute(0, 3, 1, 2).float().div_(255.0)
        batch[key] = value.float()
    batch[TASK] = [str(t) for t in obs[TASK]]
    return batch


class RolloutAdapter:
    """Drives a policy from raw batched env observations; satisfies ``vla_wmrl.rollout.RolloutPolicy``.

    Args:
        policy: a policy implementing :class:`StochasticPolicy` (and LeRobot's ``reset``).
        deterministic: take the central action instead of sampling.
        task_override: replace every observation's instruction by this one (to probe language use).
        generator: draw the sampled actions' noise from this generator instead of torch's global one (so two
            adapters acting concurrently, in threads, do not consume each other's draws).
        episode_seed: draw each episode's noise from its own generator, seeded by (episode_seed, the episode's
            index): an episode's actions then depend on neither the number of workers nor the order in which
            episodes end (see ``vla_wmrl.rollout.RolloutPolicy.reset``). Overrides ``generator``.
        record_log_prob: keep the log-probability of each sampled action in ``last_log_prob`` (``policy.sample``),
            which ``run_episodes`` and ``imagine`` store with the steps, so a GRPO update need not recompute it.
    """

    def __init__(self, policy, deterministic: bool = False, task_override: str | None = None,
                 generator: torch.Generator | None = None, episode_seed: int | None = None,
                 record_log_prob: bool = False):
        self.policy, self.deterministic, self.task_override = policy, deterministic, task_override
        self.generator, self.episode_seed = generator, episode_seed
        if record_log_prob and task_override is not None:  # the steps keep the env's instruction, not the override
            raise ValueError("RolloutAdapter: record_log_prob scores actions under the instruction the steps keep; "
                             "it cannot be combined with task_override")
        self.record_log_prob = record_log_prob
        self.last_log_prob: np.ndarray | None = None  # (num_envs,) log-probabilities of the last actions, if recorded
        self.device = next(policy.parameters()).device
        self._episode_gens: list[torch.Generator] = []

    def reset(self, mask: np.ndarray, episodes: np.ndarray | None = None) -> None:
        if np.any(mask):
            self.policy.reset()
        if self.episode_seed is None:
            return
        if episodes is None:
            raise ValueError("RolloutAdapter(episode_seed=...) needs the episodes' indices: reset(mask, episodes)")
        if len(self._episode_gens) != len(mask):  # idle workers keep a generator too: their actions are discarded
            self._episode_gens = [torch.Generator(self.device) for _ in mask]
        for i in np.flatnonzero(mask):
            if episodes[i] >= 0:
                key = np.random.SeedSequence([self.episode_seed, int(episodes[i])]).generate_state(1, np.uint64)[0]
                self._episode_gens[i].manual_seed(int(key))

    @torch.no_grad()
    def act(self, obs: dict, info: dict) -> np.ndarray:
        batch = obs_to_batch(obs, self.policy.config.input_features, self.device)
        if self.task_override is not None:
            batch[TASK] = [self.task_override] * len(batch[TASK])
        generator = self._episode_gens if self.episode_seed is not None else self.generator
        self.last_log_prob = None
        if self.record_log_prob and not self.deterministic:
            actions, log_prob = self.policy.sample(batch, generator=generator)
            self.last_log_prob = log_prob.float().cpu().numpy()
            return actions.cpu().numpy()
        return self.policy.select_action(batch, deterministic=self.deterministic, generator=generator).cpu().numpy()


def set_exploration_std(policy, std: float) -> None:
    """Reset a policy's learned, state-independent exploration std (``log_std``) to ``std``: before RL (the trainer
    copies the frozen reference afterwards, so the KL penalty compares like with like) and when recording a policy's
    rollouts (``vla_wmrl.collect``)."""
    if not std > 0:
        raise ValueError(f"wmrl.explore_std must be > 0 (or null to keep the policy's own), got {std}")
    log_std = getattr(policy, "log_std", None)
    if not isinstance(log_std, torch.nn.Parameter):
        raise ValueError(f"wmrl.explore_std: policy {policy.config.type!r} has no state-independent log_std "
                         f"parameter to reset; set wmrl.explore_std=null")
    with torch.no_grad():
        log_std.fill_(float(np.log(std)))
