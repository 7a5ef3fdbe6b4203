"""Copy a LeRobotDataset with every camera resized to a square ``image_size`` (the world models need square images).

A dataset recorded on a real robot with ``lerobot-record`` holds camera frames at the camera's resolution (say
480x640). The world model and the policy work on small square frames (64x64 by default), so the dataset is resized
once, here, and everything downstream (``sft``, ``train_world_model``, ``train``) reads the resized copy. On the
robot, ``RobotEnv`` resizes live camera frames with the same function (``vla_wmrl.data.resize_images``)::

    python -m vla_wmrl.resize_dataset src=data/so101_pick_cube dst=data/so101_pick_cube_64 image_size=64

State, action, ``next.*`` values (when present), instructions, fps and motor names are copied unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from vla_wmrl.data import create_dataset, load_dataset, resize_images
from vla_wmrl.dataset_spec import NEXT_FEATURES, dataset_spec

log = logging.getLogger(__name__)


def resize_dataset(src: str | Path, dst: str | Path, image_size: int = 64, mode: str = "squash",
                   video: bool | None = None, overwrite: bool = False) -> dict:
    """Write a copy of the dataset at ``src`` to ``dst`` with square ``image_size`` images.

    Args:
        src: source LeRobotDataset (path or repo id).
        dst: directory of the copy.
        image_size: height = width of every camera image in the copy.
        mode: ``squash`` (whole view, aspect ratio changes) or ``crop`` (central square).
        video: store images as mp4 (default: as the source does).
        overwrite: replace an existing dataset at ``dst``.

    Returns:
        Figures of the copy: episodes, frames, image shapes before and after.
    """
    spec = dataset_spec(src)
    ds = load_dataset(spec.root, spec.repo_id)
    features = spec.features(video=video)
    for key in spec.image_keys:
        features[key] = {**features[key], "shape": (image_size, image_size, 3)}
    has_next = [k for k in NEXT_FEATURES if k in ds.meta.features]
    features = {k: v for k, v in features.items() if not k.startswith("next.") or k in has_next}
    out = create_dataset(dst, f"local/{Path(dst).name}", spec.fps, features, overwrite)
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=False, num_workers=0)
    current = None
    for batch in tqdm(loader, desc=f"resize {Path(str(src)).name}", unit="batch"):
        images = {k: resize_images((batch[k].permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy(),
                                   image_size, mode) for k in spec.image_keys}
        for i, episode in enumerate(batch["episode_index"].tolist()):
            if current is not None and episode != current:
                out.save_episode()
            current = episode
            frame = {k: images[k][i] for k in spec.image_keys}
            frame["observation.state"] = batch["observation.state"][i].float().numpy()
            frame["action"] = batch["action"][i].float().numpy()
            for k in has_next:
                frame[k] = np.asarray(batch[k][i].numpy(), dtype=np.dtype(features[k]["dtype"])).reshape(1)
            frame["task"] = batch["task"][i]
            out.add_frame(frame)
    if current is not None:
        out.save_episode()
    out.finalize()
    summary = {"src": str(src), "dst": str(dst), "episodes": int(out.meta.total_episodes),
               "frames": int(out.meta.total_frames), "image_shapes_before": spec.image_shapes,
               "image_size": image_size, "mode": mode}
    log.info("resized %d episodes (%d frames) from %s to %dx%d -> %s", summary["episodes"], summary["frames"],
             spec.image_shapes, image_size, image_size, dst)
    return summary


@hydra.main(config_path="../configs", config_name="resize_dataset", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return resize_dataset(cfg.src, cfg.dst, cfg.image_size, cfg.mode, cfg.video, cfg.overwrite)


if __name__ == "__main__":
    main()
