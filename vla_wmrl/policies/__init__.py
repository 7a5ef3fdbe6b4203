"""Policies by name: ``policy=<name>`` on the command line, the YAML stem under ``configs/policy/``.

    from vla_wmrl.policies import make_policy_config, make_policy, load_policy
    cfg = make_policy_config("tiny_vla", hidden_dim=128)
    policy = make_policy(cfg, dataset.meta)          # shapes and statistics from the dataset
    policy.save_pretrained("outputs/my_policy")
    policy = load_policy("outputs/my_policy", env)   # fails clearly if it does not fit the env

Importing this package registers every config with LeRobot's ``PreTrainedConfig`` registry (so LeRobot's own loading
path finds them); the modeling code is imported only when a policy class is asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from lerobot.configs import PreTrainedConfig

from vla_wmrl.policies.base import (RolloutAdapter, StochasticPolicy, check_env_compat, features_from_dataset,
                                   set_exploration_std)

# registered name -> module of its <Name>Config; <Name>Policy lives in the sibling modeling_* module (LeRobot's rule)
POLICIES: dict[str, str] = {
    "tiny_vla": "vla_wmrl.policies.configuration_tiny_vla",
}

for _module in POLICIES.values():
    importlib.import_module(_module)  # registration only: config modules are light


def _check_name(name: str) -> None:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid policies: {sorted(POLICIES)}")


def make_policy_config(name: str, **kwargs) -> PreTrainedConfig:
    """A fresh ``<Name>Config`` for a registered policy; ``kwargs`` override its defaults.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    _check_name(name)
    return PreTrainedConfig.get_choice_class(name)(**kwargs)


def get_policy_class(name: str) -> type:
    """The ``<Name>Policy`` class of a registered policy, imported on first use."""
    _check_name(name)
    config_cls = PreTrainedConfig.get_choice_class(name)
    module = importlib.import_module(config_cls.__module__.replace("configuration_", "modeling_"))
    return getattr(module, config_cls.__name__.removesuffix("Config") + "Policy")


def make_policy(config: PreTrainedConfig, dataset_meta=None):
    """Build a fresh policy; shapes (and normalisation statistics) come from a LeRobotDataset's ``meta``.

    Args:
        config: a config from :func:`make_policy_config`. Its features are filled from ``dataset_meta`` when given.
        dataset_meta: ``LeRobotDataset.meta`` (``features`` and ``stats``), or ``None`` if ``config`` already has
            its features (the policy then starts with identity normalisation).
    """
    stats = None
    if dataset_meta is not None:
        config.input_features, config.output_features = features_from_dataset(dataset_meta.features)
        stats = dataset_meta.stats
    return get_policy_class(config.type)(config, dataset_stats=stats).to(config.device)


def load_policy(path: str | Path, env=None, device: str | None = None):
    """Load a policy saved with ``save_pretrained`` through LeRobot's loading path.

    Args:
        path: the saved directory (``config.json`` + ``model.safetensors``).
        env: optional env (single or vector) whose spaces the policy must fit.
        device: override the saved device (e.g. ``"cpu"``).

    Raises:
        FileNotFoundError: nothing saved at ``path``.
        ValueError: the policy does not fit ``env`` (action dimension, observation keys or shapes).
    """
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no saved policy at {path} (missing config.json); train one with "
                                f"`python -m vla_wmrl.sft` and pass its pretrained_model directory")
    config = PreTrainedConfig.from_pretrained(path)
    if device is not None:
        config.device = device
    if env is not None:
        obs_space = getattr(env, "single_observation_space", env.observation_space)
        act_space = getattr(env, "single_action_space", env.action_space)
        check_env_compat(config, obs_space, act_space, source=f"policy {path}")
    return get_policy_class(config.type).from_pretrained(path, config=config)


__all__ = ["POLICIES", "RolloutAdapter", "StochasticPolicy", "check_env_compat", "get_policy_class", "load_policy",
           "make_policy", "make_policy_config", "set_exploration_std"]
