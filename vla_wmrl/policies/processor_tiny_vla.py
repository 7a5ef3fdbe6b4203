"""LeRobot processor pipelines for TinyVLA, found by ``lerobot.policies.factory.make_pre_post_processors`` by name.

TinyVLA normalises its inputs itself (the statistics are in its weights), so these pipelines only add the batch
dimension and move tensors between devices; its ``normalization_mapping`` is IDENTITY throughout.
"""

from __future__ import annotations

from lerobot.processor import make_default_pre_post_processors

from vla_wmrl.policies.configuration_tiny_vla import TinyVLAConfig


def make_tiny_vla_pre_post_processors(config: TinyVLAConfig, dataset_stats: dict | None = None):
    """Pre-processor (rename, batch, device) and post-processor (device -> CPU) for TinyVLA."""
    return make_default_pre_post_processors(config, dataset_stats, normalizer_device=config.device)
