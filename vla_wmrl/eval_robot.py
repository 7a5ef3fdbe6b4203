"""Evaluate a policy on a robot through LeRobot's drivers; every episode is recorded as a LeRobotDataset.

Usage::

    # the simulated robot (no hardware): the whole robot path end to end
    python -m vla_wmrl.eval_robot robot=vla_wmrl_sim policy_path=expert dataset=data/mujoco_reach/expert_50 episodes=5
    # an SO-101 follower arm
    python -m vla_wmrl.eval_robot robot=so101_follower robot.port=/dev/ttyACM0 robot.id=my_follower \\
        policy_path=outputs/sft/.../pretrained_model dataset=data/so101_pick_cube episodes=10 task="pick up the cube"

Writes ``summary.json`` (success rate, episode lengths, safety clipping, how the run ended) in the Hydra run
directory and the recorded dataset at ``root``. Ctrl-C or a robot failure stops the robot cleanly; the summary then
covers the finished episodes and says why it stopped.
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from vla_wmrl.config import write_summary
from vla_wmrl.dataset_spec import DatasetSpec, dataset_spec
from vla_wmrl.robot_env import KeyboardOperator, RobotEnv, RobotEnvConfig, RobotStopped, SimOperator

log = logging.getLogger(__name__)

# Modules that register LeRobot's robot and camera config types; imported when present (hardware extras may lack).
ROBOT_MODULES = ["sims.lerobot_robot", "lerobot.robots.so_follower", "lerobot.robots.koch_follower",
                 "lerobot.robots.omx_follower", "lerobot.robots.lekiwi", "lerobot.robots.bi_so_follower",
                 "lerobot.cameras.opencv", "lerobot.cameras.realsense"]


def robot_config(robot_cfg: dict):
    """LeRobot's ``RobotConfig`` for a config dict with a ``type`` (the YAML under ``configs/robot/``), decoded by
    LeRobot's own config classes (draccus), as ``lerobot-record --robot.type=...`` does.

    Raises:
        ValueError: unknown robot type (the message lists the registered ones) or invalid fields.
    """
    import draccus
    from lerobot.robots import RobotConfig

    for module in ROBOT_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as e:
            log.debug("robot/camera module %s not importable: %s", module, e)
    robot_cfg = {k: v for k, v in robot_cfg.items() if v is not None}
    kind = robot_cfg.get("type")
    valid = sorted(RobotConfig.get_known_choices())
    if kind not in valid:
        raise ValueError(f"unknown robot type {kind!r}; registered robot types: {valid}")
    return draccus.decode(RobotConfig, robot_cfg)


def make_robot(robot_cfg: dict):
    """A LeRobot robot (not connected) built by LeRobot's ``make_robot_from_config`` from a config dict."""
    from lerobot.robots import make_robot_from_config

    return make_robot_from_config(robot_config(robot_cfg))


def load_robot_policy(policy_path: str, spec: DatasetSpec, robot=None, device: str = "cpu",
                      deterministic: bool = True, seed: int = 0):
    """A batched rollout policy (``vla_wmrl.rollout.RolloutPolicy``) for the robot path.

    The one place this module couples to the policy package. ``policy_path=expert`` is the simulated robot's
    scripted expert (a sanity check of the robot path); anything else is a directory saved with
    ``save_pretrained``, loaded through ``vla_wmrl.policies``.

    Raises:
        ValueError: the policy's inputs or action dimension do not match the dataset's; both sides are named.
    """
    if policy_path == "expert":
        from sims.lerobot_robot import SimRobot, SimRobotExpert

        if not isinstance(robot, SimRobot):
            raise ValueError(f"policy_path=expert is the simulator's scripted expert; it needs robot=vla_wmrl_sim, "
                             f"not {type(robot).__name__}")
        return SimRobotExpert(robot, seed=seed)
    try:
        from vla_wmrl.policies import RolloutAdapter, load_policy
    except ImportError as e:
        raise ImportError(f"loading the policy at {policy_path} needs the vla_wmrl.policies package: {e}") from e
    policy = load_policy(policy_path, device=device)
    policy.eval()
    cfg = policy.config
    expected = {k: tuple(f.shape) for k, f in cfg.input_features.items()}
    provided = {f"observation.images.{c}": (s[2], s[0], s[1]) for c, s in spec.image_shapes.items()}
    provided["observation.state"] = (spec.state_dim,)
    wrong = {k: v for k, v in expected.items() if provided.get(k) != v}
    action_shape = tuple(cfg.output_features["action"].shape)
    if wrong or action_shape != (spec.action_dim,):
        raise ValueError(f"policy {policy_path} expects inputs {expected} (images as C, H, W) and outputs action "
                         f"{action_shape}, but dataset {spec.repo_id!r} provides {provided} and action "
                         f"({spec.action_dim},)")
    return RolloutAdapter(policy, deterministic=deterministic)


def evaluate_robot(env: RobotEnv, policy, episodes: int, seed: int = 0) -> dict:
    """Run ``episodes`` episodes on a connected :class:`RobotEnv`; stop early, cleanly, on Ctrl-C or a robot
    failure. Returns summary figures over the finished episodes."""
    successes, lengths, stopped, t0 = [], [], None, time.perf_counter()
    try:
        for k in range(episodes):
            ep = env.run_episode(policy, seed=seed + k, keep_images=False)
            successes.append(ep.success)
            lengths.append(ep.length)
            log.info("episode %d/%d: %s (success rate so far %.2f)", k + 1, episodes,
                     "success" if ep.success else "failure", np.mean(successes))
    except KeyboardInterrupt:
        stopped = "interrupted by the operator (Ctrl-C)"
    except RobotStopped as e:
        stopped = str(e)
    finally:
        env.close(stopped)
    if stopped:
        log.error("evaluation stopped after %d of %d episodes: %s", len(successes), episodes, stopped)
    steps = max(env.stats["steps"], 1)
    return {"episodes_requested": episodes, "episodes": len(successes),
            "success_rate": float(np.mean(successes)) if successes else None,
            "successes": [bool(s) for s in successes], "mean_length": float(np.mean(lengths)) if lengths else None,
            "stopped": stopped, "partial_episodes": env.partial_episodes,
            "clipped_action_fraction": env.stats["clipped_steps"] / steps,
            "period_overruns": env.stats["overruns"], "fps": env.fps, "seconds": time.perf_counter() - t0,
            "dataset": str(env.record_root) if env.record_root else None}


def make_operator(kind: str, robot, input_fn=input):
    """The operator who resets the scene and labels episodes: ``auto`` (the simulated robot resets itself, else the
    keyboard), ``keyboard`` (Enter to reset, y/n to label) or ``sim``."""
    if kind == "auto":
        return SimOperator(robot) if hasattr(robot, "reset_scene") else KeyboardOperator(input_fn)
    if kind == "keyboard":
        return KeyboardOperator(input_fn)
    if kind == "sim":
        return SimOperator(robot)
    raise ValueError(f"unknown operator {kind!r}; valid: ['auto', 'keyboard', 'sim']")


def _success_fn(spec: str | None):
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"success_classifier must be 'module:function', got {spec!r}")
    return getattr(importlib.import_module(module), name)


def run(cfg: DictConfig, run_dir: str | Path, input_fn=input) -> dict:
    """Build robot, dataset spec, policy and adapter from a composed config and evaluate; returns the summary."""
    if cfg.dataset is None:
        raise ValueError("dataset=<path or repo id> is required: the policy's training dataset defines the "
                         "cameras, state/action layout, fps, instruction and the safe action range")
    spec = dataset_spec(cfg.dataset)
    robot_cfg = OmegaConf.to_container(cfg.robot, resolve=True)
    robot = make_robot(robot_cfg)
    policy = load_robot_policy(cfg.policy_path, spec, robot, cfg.device, cfg.deterministic, cfg.seed)
    env_cfg = RobotEnvConfig(episode_time_s=cfg.episode_time_s, fps=cfg.fps, realtime=cfg.realtime, task=cfg.task,
                             action_margin=cfg.action_margin, max_action_delta=cfg.max_action_delta,
                             read_timeout_s=cfg.read_timeout_s, stop_when_robot_done=cfg.stop_when_robot_done,
                             video=cfg.video, resize_images=cfg.get("resize_images"))
    env = RobotEnv(robot, spec, env_cfg, operator=make_operator(cfg.operator, robot, input_fn),
                   success_fn=_success_fn(cfg.success_classifier),
                   record_root=cfg.root, repo_id=cfg.repo_id, overwrite=cfg.overwrite)
    env.connect()
    summary = evaluate_robot(env, policy, cfg.episodes, cfg.seed)
    summary.update({"robot": robot_cfg["type"], "policy": str(cfg.policy_path), "train_dataset": str(cfg.dataset)})
    path = write_summary(run_dir, summary)
    log.info("success rate %s over %d episodes -> dataset %s, summary %s", summary["success_rate"],
             summary["episodes"], cfg.root, path)
    return summary


@hydra.main(config_path="../configs", config_name="eval_robot", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run(cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
