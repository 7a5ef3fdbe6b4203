"""Action-conditioned video world models, registered by name, and the imagined environment built on them.

Select one by name (the YAML stem under ``configs/world_model/``)::

    from world_models import make_world_model, load_world_model
    model = make_world_model("conv", {"image_keys": ["observation.images.agentview"], "image_size": 64,
                                      "state_dim": 9, "action_dim": 7})
    model = load_world_model("outputs/train_world_model/robosuite_lift/conv/checkpoints/last")

``world_models`` never imports ``vla_wmrl``.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import fields
from pathlib import Path

from world_models.base import Prediction, StepOutput, WorldModel, WorldModelConfig

# name -> (module, model class, config class); imported lazily so `diffusers` loads only when asked for.
WORLD_MODELS: dict[str, tuple[str, str, str]] = {
    "conv": ("world_models.conv", "ConvWorldModel", "ConvConfig"),
    "diffusion": ("world_models.diffusion", "DiffusionWorldModel", "DiffusionConfig"),
}


def _classes(name: str) -> tuple[type[WorldModel], type[WorldModelConfig]]:
    if name not in WORLD_MODELS:
        raise ValueError(f"unknown world model {name!r}; valid world models: {sorted(WORLD_MODELS)}")
    module, model_cls, cfg_cls = WORLD_MODELS[name]
    mod = importlib.import_module(module)
    return getattr(mod, model_cls), getattr(mod, cfg_cls)


def make_config(name: str, cfg: dict | WorldModelConfig | None = None) -> WorldModelConfig:
    """The config dataclass of model ``name``, filled from a dict (or returned as is when already a config).

    Raises:
        ValueError: unknown model name, or a key the config does not have (the message lists the valid keys).
    """
    _, cfg_cls = _classes(name)
    if isinstance(cfg, WorldModelConfig):
        return cfg
    cfg = dict(cfg or {})
    cfg.setdefault("name", name)
    valid = [f.name for f in fields(cfg_cls)]
    unknown = [k for k in cfg if k not in valid]
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for {cfg_cls.__name__}; valid keys: {valid}")
    if cfg["name"] != name:
        raise ValueError(f"config names world model {cfg['name']!r} but {name!r} was asked for")
    return cfg_cls(**cfg)


def make_world_model(name: str, cfg: dict | WorldModelConfig | None = None) -> WorldModel:
    """Build world model ``name`` from its config (a dataclass or a dict of its fields, shapes included).

    Raises:
        ValueError: unknown name (lists the valid names), unknown config keys, or missing shapes.
    """
    model_cls, _ = _classes(name)
    return model_cls(make_config(name, cfg))


def load_world_model(directory: str | Path, map_location: str = "cpu") -> WorldModel:
    """Rebuild a world model from a checkpoint directory (``config.json`` + ``model.safetensors``)."""
    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"no world-model checkpoint at {directory} (missing config.json)")
    cfg = json.loads((directory / "config.json").read_text())
    model = make_world_model(cfg["name"], cfg)
    model.load_weights(directory)
    return model.to(map_location).eval()


def __getattr__(name: str):
    if name == "ImaginedVectorEnv":  # lazy, so `import world_models` stays light
        from world_models.imagined_env import ImaginedVectorEnv
        return ImaginedVectorEnv
    raise AttributeError(name)


__all__ = ["WORLD_MODELS", "ImaginedVectorEnv", "Prediction", "StepOutput", "WorldModel", "WorldModelConfig",
           "load_world_model", "make_config", "make_world_model"]
