"""A LeRobot ``Robot`` presented as an episodic environment, for evaluation and for WMRL's anchor episodes.

One episode::

    operator resets the scene (Enter)  ->  observe -> policy -> safety -> send_action -> wait out the period  (x T)
    ->  success label (operator y/n, or a classifier)  ->  episode saved to the recording LeRobotDataset

The policy sees exactly what it saw in training: ``observation.images.<cam>`` (H, W, 3) uint8,
``observation.state`` (D,) float32 and ``task``, batched as one (like a one-worker vector env), and returns (1, A).
Robot features are matched to the dataset's by name (robot motor keys recorded by ``lerobot-record``) or, for an
unnamed dataset, by order and dimension; a mismatch fails at ``connect`` naming both sides.

Safety: every action is clipped to the dataset's recorded action range widened by ``action_margin``, and to
``max_action_delta`` from the previous action. A failed or unresponsive read, a bad action, Ctrl-C, or any error
stops the robot cleanly (disconnect) after saving the partial episode; finished episodes are already on disk,
because each is saved to the LeRobotDataset as soon as it ends.

Usage (an anchor episode)::

    with RobotEnv(robot, dataset_spec("data/so101_pick"), RobotEnvConfig(episode_time_s=20),
                  record_root="outputs/anchors") as env:
        episode = env.run_episode(policy)       # vla_wmrl.rollout.Episode, with .success
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

from vla_wmrl.dataset_spec import DatasetSpec
from vla_wmrl.rollout import Episode, RolloutPolicy

log = logging.getLogger(__name__)


class RobotStopped(RuntimeError):
    """The robot was stopped (failed or unresponsive read/write, bad action); the robot is disconnected and the
    recorded data (finished episodes and the partial one) is kept."""


@dataclass
class RobotEnvConfig:
    """Episode, timing and safety settings of a :class:`RobotEnv`."""

    episode_time_s: float = 30.0            # episode time limit, seconds (steps = episode_time_s * fps)
    fps: int | None = None                  # control rate, Hz; None = the dataset's
    realtime: bool = True                   # sleep to keep the control period; false = as fast as possible (sims)
    task: str | None = None                 # instruction; None = the robot's own (sims) or the dataset's only one
    action_margin: float = 0.05             # widen the dataset's action range by this fraction of it on each side
    max_action_delta: float | list[float] | None = None  # max change of each action entry per step; None = off
    read_timeout_s: float | None = 5.0      # a robot call taking longer means an unresponsive robot; None = no limit
    stop_when_robot_done: bool = True       # end the episode when the robot says so (a simulated robot's success)
    video: bool = True                      # record images as mp4 (LeRobot's default); false = PNG
    resize_images: str | None = None        # squash | crop: resize camera frames to the dataset's size (as
                                            # vla_wmrl.resize_dataset did); None = sizes must match


class KeyboardOperator:
    """The human operator at the keyboard: resets the scene (Enter) and labels each episode (y/n).

    Args:
        input_fn: reads one line after a prompt (``input``; injectable for tests).
    """

    def __init__(self, input_fn: Callable[[str], str] = input):
        self.input_fn = input_fn

    def wait_reset(self, seed: int, task: str | None) -> None:
        """Block until the operator has put the scene back for the next episode."""
        what = f" for {task!r}" if task else ""
        self.input_fn(f"[episode {seed}] reset the scene{what}, then press Enter (Ctrl-C stops) ")

    def label_success(self, episode: Episode) -> bool:
        """Ask until the operator answers y or n."""
        while True:
            answer = self.input_fn(f"[episode {episode.seed}] success? [y/n] ").strip().lower()
            if answer in ("y", "yes", "n", "no"):
                return answer.startswith("y")


class SimOperator:
    """The operator of a simulated robot (``sims.lerobot_robot.SimRobot``): seeded scene resets, true success."""

    def __init__(self, robot):
        if not hasattr(robot, "reset_scene"):
            raise TypeError(f"{type(robot).__name__} cannot reset its own scene; use KeyboardOperator")
        self.robot = robot

    def wait_reset(self, seed: int, task: str | None) -> None:
        self.robot.reset_scene(seed)

    def label_success(self, episode: Episode) -> bool:
        return bool(self.robot.is_success)


def _describe(features: dict) -> str:
    return ", ".join(f"{k}: {getattr(v, '__name__', v)}" for k, v in features.items())


def match_features(robot, spec: DatasetSpec, resize: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Map a robot's features onto the dataset's (= the policy's) inputs and outputs. With ``resize``, camera
    images may differ from the dataset's in height and width (they are resized), not in channels.

    Returns:
        (cameras, state keys, action keys): robot observation keys of each dataset camera, robot observation keys
        forming ``observation.state`` in order, robot action keys forming ``action`` in order.

    Raises:
        ValueError: missing camera, other image shape, other state or action dimension or names; the message names
            both the robot's and the dataset's features.
    """
    obs_ft, act_ft = robot.observation_features, robot.action_features
    robot_cams = {k: tuple(v) for k, v in obs_ft.items() if isinstance(v, tuple)}
    robot_floats = [k for k, v in obs_ft.items() if v is float]
    robot_actions = [k for k, v in act_ft.items() if v is float]
    problems = []
    missing_cams = [c for c in spec.cameras if c not in robot_cams]
    if missing_cams:
        problems.append(f"missing camera(s) {missing_cams} (robot cameras: {sorted(robot_cams)})")
    for c in spec.cameras:
        want = tuple(spec.image_shapes[c])
        if c in robot_cams and (robot_cams[c][-1:] != want[-1:] if resize else robot_cams[c] != want):
            problems.append(f"camera {c!r} gives images of shape {robot_cams[c]}, the dataset's are {want}"
                            + ("" if resize else " (resize_images=squash|crop resizes them, as "
                                                 "`python -m vla_wmrl.resize_dataset` did the dataset)"))

    def vector(kind: str, names: list[str] | None, dim: int, available: list[str]) -> list[str]:
        if names:
            missing = [n for n in names if n not in available]
            if missing:
                problems.append(f"{kind} entries {missing} are not robot features (robot has {available})")
            return list(names)
        if len(available) != dim:
            problems.append(f"{kind} dimension: the robot has {len(available)} ({available}), the dataset {dim}")
        return list(available)

    state_keys = vector(OBS_STATE, spec.state_names, spec.state_dim, robot_floats)
    action_keys = vector(ACTION, spec.action_names, spec.action_dim, robot_actions)
    if problems:
        raise ValueError(
            f"robot {getattr(robot, 'name', type(robot).__name__)!r} does not match the policy's dataset "
            f"{spec.repo_id!r}: " + "; ".join(problems) + ".\n"
            f"  robot observation features: {_describe(obs_ft)}\n"
            f"  robot action features: {_describe(act_ft)}\n"
            f"  dataset: cameras {dict(spec.image_shapes)}, {OBS_STATE} ({spec.state_dim},) names "
            f"{spec.state_names}, {ACTION} ({spec.action_dim},) names {spec.action_names}")
    return list(spec.cameras), state_keys, action_keys


class ActionSafety:
    """Clip actions to a range and to a maximum change per step.

    Args:
        low: per-dimension lower bound (A,).
        high: per-dimension upper bound (A,).
        max_delta: maximum |a_t - a_{t-1}| per dimension (scalar or (A,)), or None.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, max_delta: float | list[float] | None = None):
        self.low, self.high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if np.any(self.low > self.high):
            raise ValueError(f"action range low {self.low} exceeds high {self.high}")
        self.max_delta = None if max_delta is None else np.broadcast_to(
            np.asarray(max_delta, dtype=np.float64), self.low.shape)
        if self.max_delta is not None and np.any(self.max_delta <= 0):
            raise ValueError(f"max_action_delta must be positive, got {max_delta}")

    @classmethod
    def from_spec(cls, spec: DatasetSpec, margin: float, max_delta=None) -> "ActionSafety":
        """The dataset's recorded action range widened by ``margin`` times its width on each side."""
        if spec.action_min is None or spec.action_max is None:
            raise ValueError(f"dataset {spec.repo_id!r} has no action statistics (meta/stats.json); they bound the "
                             f"robot's actions, so a robot cannot run without them")
        width = spec.action_max - spec.action_min
        return cls(spec.action_min - margin * width, spec.action_max + margin * width, max_delta)

    def __call__(self, action: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
        """The safe action. ``previous`` (A,) may hold NaN where no previous value is known."""
        action = np.asarray(action, dtype=np.float64)
        if self.max_delta is not None and previous is not None:
            known = np.isfinite(previous)
            limited = np.clip(action, previous - self.max_delta, previous + self.max_delta)
            action = np.where(known, limited, action)
        return np.clip(action, self.low, self.high)


class RobotEnv:
    """A LeRobot robot as an environment: episodes with operator resets and labels, safety, recording.

    Args:
        robot: a ``lerobot.robots.Robot`` (built with ``make_robot_from_config``), not yet connected.
        spec: the dataset spec the policy was trained on (:func:`vla_wmrl.dataset_spec.dataset_spec`).
        cfg: episode, timing and safety settings.
        operator: resets the scene and labels success; default :class:`SimOperator` for a robot that resets its
            own scene, else :class:`KeyboardOperator`.
        success_fn: a classifier ``Episode -> bool``; when given it labels every episode instead of the operator.
        record_root: directory of the LeRobotDataset the episodes are recorded into; None records nothing.
        repo_id: repo id of that dataset.
        overwrite: replace an existing dataset at ``record_root``.
    """

    def __init__(self, robot, spec: DatasetSpec, cfg: RobotEnvConfig | None = None, operator=None,
                 success_fn: Callable[[Episode], bool] | None = None, record_root: str | Path | None = None,
                 repo_id: str | None = None, overwrite: bool = False):
        self.robot, self.spec, self.cfg = robot, spec, cfg or RobotEnvConfig()
        self.operator = operator or (SimOperator(robot) if hasattr(robot, "reset_scene") else KeyboardOperator())
        self.success_fn = success_fn
        self.record_root, self.overwrite = record_root, overwrite
        self.repo_id = repo_id or f"local/{Path(record_root).name if record_root else 'robot'}"
        self.fps = int(self.cfg.fps or spec.fps)
        self.max_steps = max(1, int(round(self.cfg.episode_time_s * self.fps)))
        self.safety = ActionSafety.from_spec(spec, self.cfg.action_margin, self.cfg.max_action_delta)
        self.dataset = None
        self.cameras: list[str] = []
        self.state_keys: list[str] = []
        self.action_keys: list[str] = []
        self.episodes_done = 0                  # finished, labelled, saved episodes
        self.partial_episodes: list[int] = []   # dataset indices of episodes cut short by a stop
        self.stats = {"steps": 0, "clipped_steps": 0, "overruns": 0}
        self.stop_reason: str | None = None
        self._closed = False

    # ---------------------------------------------------------------------------------------------------------- #
    def connect(self) -> "RobotEnv":
        """Check the robot's features against the dataset's, connect the robot, open the recording dataset.

        Raises:
            ValueError: the robot's features do not match (nothing is connected then), or no instruction is known.
        """
        self.cameras, self.state_keys, self.action_keys = match_features(self.robot, self.spec,
                                                                         resize=bool(self.cfg.resize_images))
        if self.cfg.task is None and not hasattr(self.robot, "task") and len(self.spec.instructions) != 1:
            raise ValueError(f"which instruction? the dataset has {len(self.spec.instructions)}: "
                             f"{self.spec.instructions}; pass task=\"...\"")
        if self.record_root is not None:
            from vla_wmrl.data import create_dataset

            features = self.spec.features(video=self.cfg.video, state_names=self.state_keys,
                                          action_names=self.action_keys)
            self.dataset = create_dataset(self.record_root, self.repo_id, self.fps, features, self.overwrite)
        try:
            self.robot.connect()
        except BaseException:
            self._closed = True
            if self.dataset is not None:
                self.dataset.finalize()
            raise
        log.info("%s connected: cameras %s, state %s, action %s, %d Hz, %d steps per episode", self.robot,
                 self.cameras, self.state_keys, self.action_keys, self.fps, self.max_steps)
        return self

    def __enter__(self) -> "RobotEnv":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, reason: str | None = None) -> None:
        """Finish the recording dataset and disconnect the robot (idempotent; safe after a failure)."""
        if self._closed:
            return
        self._closed = True
        self.stop_reason = self.stop_reason or reason
        try:
            if self.dataset is not None:
                self.dataset.finalize()
        finally:
            self._disconnect()

    def _disconnect(self) -> None:
        if not getattr(self.robot, "is_connected", False):
            return
        try:
            self._call("disconnect", self.robot.disconnect)
        except RobotStopped as e:
            log.error("could not disconnect %s cleanly (%s): check the robot, power it off if it still holds "
                      "torque", self.robot, e)

    def _call(self, what: str, fn, *args):
        """Run one robot call with the read timeout; any failure becomes :class:`RobotStopped`."""
        timeout = self.cfg.read_timeout_s
        box: dict = {}

        def target():
            try:
                box["value"] = fn(*args)
            except BaseException as e:  # handed to the caller's thread below
                box["error"] = e

        if not timeout:
            target()
        else:
            worker = threading.Thread(target=target, name=f"robot-{what}", daemon=True)
            worker.start()
            worker.join(timeout)
            if worker.is_alive():
                raise RobotStopped(f"robot unresponsive: {what} did not return within {timeout} s")
        if "error" in box:
            e = box["error"]
            if isinstance(e, KeyboardInterrupt):
                raise e
            raise RobotStopped(f"robot {what} failed: {type(e).__name__}: {e}") from e
        return box["value"]

    # ---------------------------------------------------------------------------------------------------------- #
    def _observe(self) -> dict:
        raw = self._call("get_observation", self.robot.get_observation)
        missing = [k for k in self.state_keys + self.cameras if k not in raw]
        if missing:
            raise RobotStopped(f"robot observation lacks {missing} (it has {sorted(raw)})")
        state = np.asarray([raw[k] for k in self.state_keys], dtype=np.float32)
        if not np.isfinite(state).all():
            raise RobotStopped(f"robot state is not finite: {dict(zip(self.state_keys, state.tolist()))}")
        obs = {OBS_STATE: state}
        for c in self.cameras:
            img = np.asarray(raw[c])
            want = tuple(self.spec.image_shapes[c])
            if self.cfg.resize_images and img.ndim == 3 and img.shape[-1] == want[-1]:
                from vla_wmrl.data import resize_images  # a no-op when the size already matches

                img = resize_images(img.astype(np.uint8, copy=False), want[0], self.cfg.resize_images)
            if img.shape != want:
                raise RobotStopped(f"camera {c!r} returned an image of shape {img.shape}, expected "
                                   f"{tuple(self.spec.image_shapes[c])}")
            obs[f"{OBS_IMAGES}.{c}"] = img.astype(np.uint8, copy=False)
        return obs

    def _task(self) -> str:
        if self.cfg.task is not None:
            return self.cfg.task
        robot_task = getattr(self.robot, "task", None)
        if robot_task:
            return str(robot_task)
        if len(self.spec.instructions) == 1:
            return self.spec.instructions[0]
        raise ValueError(f"no instruction: the dataset has {self.spec.instructions}; pass task=\"...\"")

    def _write(self, frame: dict) -> None:
        """Add one finished frame (with its ``next.*`` values) to the recording dataset."""
        if self.dataset is not None:
            self.dataset.add_frame({**{k: v for k, v in frame.items() if k in self.dataset.features},
                                    "next.reward": np.array([frame["next.reward"]], dtype=np.float32),
                                    "next.success": np.array([frame["next.success"]], dtype=bool),
                                    "next.done": np.array([frame["next.done"]], dtype=bool), "task": frame["task"]})

    @staticmethod
    def _append(episode: Episode, frame: dict, done: bool, keep_images: bool) -> dict:
        """Append a frame to the episode (reward and success are set at the label); return the stored dict."""
        frame = {**frame, "next.reward": 0.0, "next.success": False, "next.done": bool(done)}
        if not keep_images:
            frame = {k: v for k, v in frame.items() if not k.startswith(OBS_IMAGES)}
        episode.frames.append(frame)
        return frame

    def _save_episode(self) -> int | None:
        if self.dataset is None or not self.dataset.has_pending_frames():
            return None
        index = int(self.dataset.meta.total_episodes)
        self.dataset.save_episode()
        return index

    def run_episode(self, policy: RolloutPolicy, seed: int | None = None, keep_images: bool = True) -> Episode:
        """Reset (operator), run ``policy`` to the time limit, label success, save: one real episode.

        This is the anchor-episode API of the WMRL trainer and the unit of evaluation.

        Args:
            policy: batched rollout policy (batch of one).
            seed: the episode's seed (a simulated robot resets its scene with it); default: the episode count.
            keep_images: keep camera images in the returned episode's frames (they are recorded either way).

        Returns:
            The finished :class:`Episode`: frames in LeRobot layout, ``success`` from the label.

        Raises:
            RobotStopped: a failed or unresponsive robot call or a non-finite action; the partial episode is saved,
                the dataset finalised and the robot disconnected.
            KeyboardInterrupt: Ctrl-C, after the same clean stop.
        """
        if self._closed or not getattr(self.robot, "is_connected", False):
            raise RobotStopped(f"{self.robot} is not connected (stopped: {self.stop_reason}); connect() first")
        seed = self.episodes_done if seed is None else int(seed)
        episode = Episode(seed=seed)
        pending: dict | None = None  # the last frame, recorded once what followed it is known
        last: dict | None = None     # the final frame, once the episode has ended
        try:
            self.operator.wait_reset(seed, self.cfg.task or getattr(self.robot, "task", None))
            task = self._task()
            policy.reset(np.ones(1, dtype=bool), np.array([seed]))
            info = {"is_success": np.zeros(1, dtype=bool), "sim_unstable": np.zeros(1, dtype=bool)}
            period, previous = 1.0 / self.fps, None
            for t in range(self.max_steps):
                t0 = time.perf_counter()
                obs = self._observe()
                if previous is None:  # absolute-position actions start from where the robot is
                    state = dict(zip(self.state_keys, obs[OBS_STATE].tolist()))
                    previous = np.array([state.get(k, np.nan) for k in self.action_keys], dtype=np.float64)
                batch = {k: v[None] for k, v in obs.items()}
                batch["task"] = (task,)
                raw = np.asarray(policy.act(batch, info), dtype=np.float64).reshape(-1)
                if raw.shape != (len(self.action_keys),) or not np.isfinite(raw).all():
                    raise RobotStopped(f"policy returned an unusable action {raw} (expected {len(self.action_keys)} "
                                       f"finite values for {self.action_keys})")
                safe = self.safety(raw, previous)
                self.stats["clipped_steps"] += int(not np.allclose(safe, raw))
                sent = self._call("send_action", self.robot.send_action, dict(zip(self.action_keys, safe.tolist())))
                previous = np.array([float(sent.get(k, v)) for k, v in zip(self.action_keys, safe)])
                self.stats["steps"] += 1
                if pending is not None:
                    self._append(episode, pending, False, keep_images)
                    self._write({**pending, "next.reward": 0.0, "next.success": False, "next.done": False})
                pending = {**obs, ACTION: previous.astype(np.float32), "task": task}
                if self.cfg.stop_when_robot_done and getattr(self.robot, "episode_done", False):
                    break
                if self.cfg.realtime:
                    left = period - (time.perf_counter() - t0)
                    if left > 0:
                        time.sleep(left)
                    else:
                        self.stats["overruns"] += 1
            last = self._append(episode, pending, True, keep_images) if pending is not None else None
            success = bool(self.success_fn(episode) if self.success_fn else self.operator.label_success(episode))
        except BaseException as e:
            if last is not None:  # cut short while labelling: the whole episode is kept, unlabelled
                episode.frames = episode.frames[:-1]
            self._stop(e, pending, episode, keep_images)
            raise
        if last is not None:
            last.update({"next.reward": float(success), "next.success": success})
            self._write({**pending, **last})
        episode.success = success
        self._save_episode()
        self.episodes_done += 1
        log.info("episode %d: %s after %d steps", seed, "success" if success else "failure", episode.length)
        return episode

    def _stop(self, error: BaseException, pending: dict | None, episode: Episode, keep_images: bool) -> None:
        """Keep the partial episode, finish the dataset, disconnect; say what happened."""
        reason = ("interrupted by the operator (Ctrl-C)" if isinstance(error, KeyboardInterrupt)
                  else f"{type(error).__name__}: {error}")
        try:
            if pending is not None:
                self._write({**pending, **self._append(episode, pending, True, keep_images)})
            index = self._save_episode()
            if index is not None:
                self.partial_episodes.append(index)
        finally:
            self.close(reason)
        where = f"; data kept in {self.record_root}" if self.record_root else ""
        log.error("robot stopped during episode %d after %d steps: %s; %d finished episode(s)%s%s", episode.seed,
                  episode.length, reason, self.episodes_done,
                  f" and the partial episode {self.partial_episodes[-1]}" if self.partial_episodes else "", where)
