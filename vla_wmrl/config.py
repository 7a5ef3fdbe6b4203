"""Typed configuration schemas. Hydra YAML is turned into these dataclasses once, at the top of each entry point,
so a misspelt key fails at start-up with the list of valid keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


@dataclass
class SimConfig:
    """Simulator choice and its observation settings."""

    name: str = "robosuite_lift"   # registered sim name (sims.SIMS)
    image_size: int = 64           # camera height = width, pixels
    cameras: list[str] = field(default_factory=lambda: ["agentview"])  # camera names
    reward_type: str = "sparse"    # sparse | dense
    horizon: int = 100             # steps before truncation
    fps: int = 20                  # control frequency, Hz

    def env_kwargs(self) -> dict:
        """Keyword arguments for ``sims.make_env``."""
        return {"image_size": self.image_size, "cameras": tuple(self.cameras), "reward_type": self.reward_type,
                "horizon": self.horizon, "control_freq": self.fps}


@dataclass
class ExpertConfig:
    """Scripted expert used as the collection policy."""

    name: str = "expert"
    noise: float = 0.0             # std of Gaussian action noise in a noisy episode
    noisy_fraction: float = 1.0    # probability that an episode is noisy


def to_dataclass(schema: type, cfg: DictConfig):
    """Validate a config node against a dataclass schema and return the dataclass instance.

    Raises:
        ValueError: a key not in the schema; the message lists the valid keys.
    """
    valid = [f.name for f in fields(schema)]
    unknown = [k for k in cfg.keys() if k not in valid]
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for {schema.__name__}; valid keys: {valid}")
    merged = OmegaConf.merge(OmegaConf.structured(schema), cfg)
    return OmegaConf.to_object(merged)


def write_summary(run_dir: str | Path, summary: dict) -> Path:
    """Write the run's key figures to ``<run_dir>/summary.json`` (atomically) and return the path."""
    path = Path(run_dir) / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=float))
    tmp.replace(path)
    return path
