"""LeRobotDataset recording and loading (v3 format, local root, offline).

Frame layout (LeRobot's batch keys): ``observation.images.<cam>`` (H, W, 3) uint8 as video (mp4, LeRobot's default)
or as lossless PNG images, ``observation.state`` (D,), ``action`` (A,), ``next.reward`` (1,), ``next.success`` (1,),
``next.done`` (1,), and the instruction as the frame's ``task``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub from here

import gymnasium as gym
import numpy as np

from vla_wmrl.rollout import Episode


def dataset_features(observation_space: gym.spaces.Dict, action_space: gym.spaces.Box, video: bool = True) -> dict:
    """LeRobot feature spec for an environment's spaces (shapes come from the env, never from YAML)."""
    features = {}
    for key, space in observation_space.spaces.items():
        if key.startswith("observation.images."):
            features[key] = {"dtype": "video" if video else "image", "shape": space.shape,
                             "names": ["height", "width", "channels"]}
        elif key == "observation.state":
            features[key] = {"dtype": "float32", "shape": space.shape, "names": None}
    features["action"] = {"dtype": "float32", "shape": action_space.shape, "names": None}
    features["next.reward"] = {"dtype": "float32", "shape": (1,), "names": None}
    features["next.success"] = {"dtype": "bool", "shape": (1,), "names": None}
    features["next.done"] = {"dtype": "bool", "shape": (1,), "names": None}
    return features


def create_dataset(root: str | Path, repo_id: str, fps: int, features: dict, overwrite: bool = False,
                   video_crf: int | None = None):
    """Create an empty LeRobotDataset at ``root`` for recording.

    ``video_crf`` sets the video codec's constant rate factor (lower = closer to lossless, larger files); None keeps
    LeRobot's default.

    Raises:
        FileExistsError: ``root`` exists and ``overwrite`` is False (nothing recorded is ever silently replaced).
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(root)
    if root.exists():
        if not overwrite:
            raise FileExistsError(f"dataset directory {root} already exists; pass overwrite=true or another root")
        shutil.rmtree(root)
    use_videos = any(f["dtype"] == "video" for f in features.values())
    kwargs = {}
    if video_crf is not None:
        from lerobot.configs.video import RGBEncoderConfig

        kwargs["rgb_encoder"] = RGBEncoderConfig(crf=video_crf)
    return LeRobotDataset.create(repo_id=repo_id, fps=fps, root=root, features=features, use_videos=use_videos,
                                 **kwargs)


def write_episode(dataset, episode: Episode) -> None:
    """Append one finished episode to a recording dataset."""
    for f in episode.frames:
        frame = {k: v for k, v in f.items() if k in dataset.features}
        frame["next.reward"] = np.array([f["next.reward"]], dtype=np.float32)
        frame["next.success"] = np.array([f["next.success"]], dtype=bool)
        frame["next.done"] = np.array([f["next.done"]], dtype=bool)
        frame["task"] = f["task"]
        dataset.add_frame(frame)
    dataset.save_episode()


RESIZE_MODES = ("squash", "crop")


def resize_images(images: np.ndarray, size: int, mode: str = "squash") -> np.ndarray:
    """Resize (..., H, W, 3) uint8 images to (..., size, size, 3) with antialiased bilinear filtering.

    ``squash`` keeps the whole field of view (the aspect ratio changes); ``crop`` takes the central square first.
    The same function serves datasets (``vla_wmrl.resize_dataset``) and live robot cameras (``vla_wmrl.robot_env``),
    so the policy sees identically processed images in training and on the robot.
    """
    import torch
    import torch.nn.functional as F

    if mode not in RESIZE_MODES:
        raise ValueError(f"unknown resize mode {mode!r}; valid: {list(RESIZE_MODES)}")
    images = np.asarray(images)
    lead, (h, w) = images.shape[:-3], images.shape[-3:-1]
    if (h, w) == (size, size):
        return images
    x = torch.from_numpy(np.ascontiguousarray(images.reshape(-1, h, w, images.shape[-1]))).permute(0, 3, 1, 2)
    if mode == "crop":
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        x = x[:, :, top:top + side, left:left + side]
    y = F.interpolate(x.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    out = y.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return out.reshape(*lead, size, size, images.shape[-1])


def load_dataset(root: str | Path, repo_id: str | None = None, delta_timestamps: dict | None = None, episodes=None):
    """Open a local LeRobotDataset for reading (offline).

    Raises:
        FileNotFoundError: no dataset at ``root``.
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(root)
    if not (root / "meta" / "info.json").exists():
        raise FileNotFoundError(f"no LeRobotDataset at {root} (missing meta/info.json); collect one with "
                                f"`python -m vla_wmrl.collect` or pass dataset=<path>")
    return LeRobotDataset(repo_id or f"local/{root.name}", root=root, delta_timestamps=delta_timestamps,
                          episodes=episodes)
