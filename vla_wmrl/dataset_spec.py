"""Dataset-defined tasks: the observation and action spec of a LeRobotDataset, read from its metadata alone.

Any robot's LeRobotDataset (recorded with ``lerobot-record`` on an SO-101, or with ``vla_wmrl.collect`` in a
simulator) defines a task: which cameras and image shapes, the state and action dimensions (and their motor names,
when recorded from a robot), the control rate, the instructions, and the action range the data covers. World model,
policy, trainer and the robot adapter take their shapes from here, so ``dataset=<path or repo id>`` works without
any simulator::

    spec = dataset_spec("data/so101_pick_cube")
    spec.cameras, spec.state_dim, spec.action_dim, spec.fps, spec.instructions
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub unless the user allows it

import gymnasium as gym
import numpy as np
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

from sims.base import INSTRUCTION_CHARSET

NEXT_FEATURES = {  # what vla_wmrl records after each step, beside LeRobot's observation/action
    "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    "next.success": {"dtype": "bool", "shape": (1,), "names": None},
    "next.done": {"dtype": "bool", "shape": (1,), "names": None},
}


@dataclass(frozen=True)
class DatasetSpec:
    """Observation/action spec of a LeRobotDataset.

    Attributes:
        repo_id: dataset repo id (``local/<dir name>`` for a local directory).
        root: local dataset directory.
        fps: recording (= control) rate, Hz.
        cameras: camera names, i.e. ``observation.images.<camera>`` keys without the prefix, in dataset order.
        image_shapes: camera -> (H, W, C).
        video: whether the images are stored as mp4.
        state_dim: length of ``observation.state``.
        state_names: its entries' names (robot motor keys such as ``"shoulder_pan.pos"``), or None if unnamed.
        action_dim: length of ``action``.
        action_names: its entries' names, or None if unnamed.
        action_min: per-dimension minimum of the recorded actions, or None when the dataset has no stats.
        action_max: per-dimension maximum of the recorded actions, or None.
        instructions: the dataset's task strings, sorted.
        robot_type: the robot that recorded it (LeRobot's ``robot_type``), or None.
        num_episodes: recorded episodes.
        num_frames: recorded frames.
    """

    repo_id: str
    root: Path
    fps: int
    cameras: tuple[str, ...]
    image_shapes: dict[str, tuple[int, int, int]]
    video: bool
    state_dim: int
    state_names: list[str] | None
    action_dim: int
    action_names: list[str] | None
    action_min: np.ndarray | None
    action_max: np.ndarray | None
    instructions: list[str]
    robot_type: str | None
    num_episodes: int
    num_frames: int

    @property
    def image_keys(self) -> list[str]:
        """``observation.images.<camera>`` keys, in camera order."""
        return [f"{OBS_IMAGES}.{c}" for c in self.cameras]

    @property
    def square_image_size(self) -> int:
        """The cameras' common square image size (what the world models need).

        Raises:
            ValueError: images are not square or differ between cameras; the message says how to resize.
        """
        sizes = {self.image_shapes[c][:2] for c in self.cameras}
        if len(sizes) != 1 or len(set(next(iter(sizes)))) != 1:
            raise ValueError(f"dataset {self.repo_id} has camera images of (H, W, C) {self.image_shapes}; the world "
                             f"models need square images of one size: resize the dataset first with "
                             f"`python -m vla_wmrl.resize_dataset src={self.root} dst=<new dir> image_size=64`")
        return next(iter(sizes))[0]

    @property
    def observation_space(self) -> gym.spaces.Dict:
        """The policy's observation space, laid out like the simulators' (``sims.base``)."""
        spaces = {f"{OBS_IMAGES}.{c}": gym.spaces.Box(0, 255, self.image_shapes[c], np.uint8) for c in self.cameras}
        spaces[OBS_STATE] = gym.spaces.Box(-np.inf, np.inf, (self.state_dim,), np.float32)
        spaces["task"] = gym.spaces.Text(max_length=max([200, *map(len, self.instructions)]),
                                         charset=INSTRUCTION_CHARSET)
        return gym.spaces.Dict(spaces)

    @property
    def action_space(self) -> gym.spaces.Box:
        """The action space: the recorded action range when the dataset has stats, else unbounded."""
        if self.action_min is None:
            return gym.spaces.Box(-np.inf, np.inf, (self.action_dim,), np.float32)
        return gym.spaces.Box(self.action_min.astype(np.float32), self.action_max.astype(np.float32),
                              (self.action_dim,), np.float32)

    def features(self, video: bool | None = None, state_names: list[str] | None = None,
                 action_names: list[str] | None = None) -> dict:
        """LeRobot feature spec for recording episodes of this task (observation, action and ``next.*``).

        Args:
            video: store images as mp4 (default: as the dataset does).
            state_names: entry names to record (default: the dataset's).
            action_names: entry names to record (default: the dataset's).
        """
        video = self.video if video is None else video
        features = {f"{OBS_IMAGES}.{c}": {"dtype": "video" if video else "image", "shape": self.image_shapes[c],
                                          "names": ["height", "width", "channels"]} for c in self.cameras}
        features[OBS_STATE] = {"dtype": "float32", "shape": (self.state_dim,),
                               "names": state_names or self.state_names}
        features[ACTION] = {"dtype": "float32", "shape": (self.action_dim,),
                            "names": action_names or self.action_names}
        return {**features, **NEXT_FEATURES}


def _locate(dataset: str | Path, repo_id: str | None) -> tuple[str, Path | None]:
    path = Path(dataset).expanduser()
    if (path / "meta" / "info.json").exists():
        return repo_id or f"local/{path.name}", path
    if path.exists():
        raise FileNotFoundError(f"{path} exists but holds no LeRobotDataset (missing meta/info.json)")
    return repo_id or str(dataset), None  # a repo id: $HF_LEROBOT_HOME/<repo id>, or the hub when online


def dataset_spec(dataset: str | Path, repo_id: str | None = None) -> DatasetSpec:
    """Read the observation/action spec of a LeRobotDataset from its metadata (no frames are decoded).

    Args:
        dataset: a local dataset directory, or a repo id (found under ``$HF_LEROBOT_HOME``, or downloaded when
            ``HF_HUB_OFFLINE=0``).
        repo_id: repo id to report for a local directory (default ``local/<dir name>``).

    Raises:
        FileNotFoundError: no dataset there.
        ValueError: the dataset has no ``observation.state`` or no ``action`` feature.
    """
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    repo, root = _locate(dataset, repo_id)
    try:
        meta = LeRobotDatasetMetadata(repo, root=root)
    except Exception as e:  # the hub client raises many types when offline or the repo does not exist
        raise FileNotFoundError(f"no LeRobotDataset at {dataset!r} (not a local dataset directory, and loading it "
                                f"as repo id {repo!r} failed: {type(e).__name__}: {e})") from e
    feats = meta.features
    missing = [k for k in (OBS_STATE, ACTION) if k not in feats]
    if missing:
        raise ValueError(f"dataset {dataset} lacks {missing}; it has features {sorted(feats)}")
    cams = [k.removeprefix(f"{OBS_IMAGES}.") for k, f in feats.items()
            if k.startswith(f"{OBS_IMAGES}.") and f["dtype"] in ("image", "video")]
    stats = (meta.stats or {}).get(ACTION, {})
    amin, amax = stats.get("min"), stats.get("max")

    def names(key):
        n = feats[key].get("names")
        if isinstance(n, dict):  # older datasets: {"motors": [...]}
            n = next(iter(n.values()), None)
        return list(n) if n else None

    def hwc(key):
        shape, n = tuple(int(s) for s in feats[key]["shape"]), feats[key].get("names") or []
        return (shape[1], shape[2], shape[0]) if n and n[0] in ("channel", "channels") else shape

    return DatasetSpec(
        repo_id=repo, root=Path(meta.root), fps=int(meta.fps), cameras=tuple(cams),
        image_shapes={c: hwc(f"{OBS_IMAGES}.{c}") for c in cams},
        video=any(feats[f"{OBS_IMAGES}.{c}"]["dtype"] == "video" for c in cams),
        state_dim=int(feats[OBS_STATE]["shape"][0]), state_names=names(OBS_STATE),
        action_dim=int(feats[ACTION]["shape"][0]), action_names=names(ACTION),
        action_min=None if amin is None else np.asarray(amin, dtype=np.float64).reshape(-1),
        action_max=None if amax is None else np.asarray(amax, dtype=np.float64).reshape(-1),
        instructions=sorted(str(t) for t in meta.tasks.index) if meta.tasks is not None else [],
        robot_type=meta.robot_type, num_episodes=int(meta.total_episodes), num_frames=int(meta.total_frames),
    )
