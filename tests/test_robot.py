"""The real-robot path, run end to end on the simulated robot (`vla_wmrl_sim`): LeRobot's Robot ABC and factory,
evaluation and anchor episodes recorded as LeRobotDatasets, safety, clean stops, feature checks, dataset specs."""

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.robots import Robot, RobotConfig, make_robot_from_config
from lerobot.utils.errors import DeviceNotConnectedError

import sims
from sims.lerobot_robot import SimRobot, SimRobotConfig, SimRobotExpert
from vla_wmrl.dataset_spec import dataset_spec
from vla_wmrl.eval_robot import evaluate_robot, robot_config, run
from vla_wmrl.robot_env import ActionSafety, KeyboardOperator, RobotEnv, RobotEnvConfig, RobotStopped

CONFIGS = str(Path(__file__).resolve().parent.parent / "configs")
FAST = dict(realtime=False, episode_time_s=2.0, read_timeout_s=5.0)


@pytest.fixture
def robot(tmp_path):
    return make_robot_from_config(SimRobotConfig(calibration_dir=tmp_path / "calibration"))


@pytest.fixture(scope="module")
def spec(reach_dataset):
    return dataset_spec(reach_dataset)


class ConstantPolicy:
    """Batched policy returning a fixed action sequence (cycled); counts resets."""

    def __init__(self, actions):
        self.actions, self.t, self.resets = [np.asarray(a, dtype=np.float32) for a in actions], 0, 0

    def reset(self, mask, episodes):
        self.resets += 1

    def act(self, obs, info):
        assert obs["observation.state"].shape == (1, 12) and obs["observation.images.top"].shape == (1, 64, 64, 3)
        assert isinstance(obs["task"][0], str)
        a = self.actions[self.t % len(self.actions)]
        self.t += 1
        return a[None]


def test_sim_robot_is_a_lerobot_robot_built_by_lerobots_factory(tmp_path):
    import draccus
    from lerobot.utils.feature_utils import build_dataset_frame, hw_to_dataset_features

    assert "vla_wmrl_sim" in RobotConfig.get_known_choices()
    cfg = draccus.decode(RobotConfig, {"type": "vla_wmrl_sim", "calibration_dir": str(tmp_path)})
    robot = make_robot_from_config(cfg)
    assert isinstance(robot, Robot) and type(robot) is SimRobot and not SimRobot.__abstractmethods__
    assert cfg.type == robot.name == "vla_wmrl_sim"
    # features are known before connecting, in LeRobot's driver conventions
    assert robot.observation_features["top"] == (64, 64, 3) and robot.observation_features["shoulder.pos"] is float
    assert list(robot.action_features) == ["shoulder.delta", "elbow.delta"]
    ds_features = {**hw_to_dataset_features(robot.observation_features, "observation"),
                   **hw_to_dataset_features(robot.action_features, "action")}
    assert ds_features["observation.state"]["shape"] == (12,) and ds_features["action"]["shape"] == (2,)
    with pytest.raises(DeviceNotConnectedError):
        robot.get_observation()
    with robot:  # Robot's context manager: connect ... disconnect
        assert robot.is_connected and robot.is_calibrated and robot.task.startswith("reach the")
        obs = robot.get_observation()
        frame = build_dataset_frame(ds_features, obs, "observation")
        assert frame["observation.state"].shape == (12,) and frame["observation.images.top"].dtype == np.uint8
        sent = robot.send_action({"shoulder.delta": 3.0, "elbow.delta": -0.5})
        assert sent == {"shoulder.delta": 1.0, "elbow.delta": -0.5}  # what the simulator applied
        assert robot.get_observation()["shoulder.pos"] != obs["shoulder.pos"]
    assert not robot.is_connected


def test_dataset_spec_from_dataset_metadata_alone(reach_dataset, spec, tmp_path):
    env_space = sims.make_env("mujoco_reach").observation_space
    assert spec.cameras == ("top",) and spec.image_shapes == {"top": (64, 64, 3)} and spec.video
    assert (spec.state_dim, spec.action_dim, spec.fps) == (12, 2, 20)
    assert spec.instructions == ["reach the blue target", "reach the red target"]
    assert np.all(spec.action_min >= -1.0) and np.all(spec.action_max <= 1.0)
    assert spec.num_episodes == 12 and spec.root == reach_dataset
    for key in ("observation.images.top", "observation.state"):
        assert spec.observation_space[key].shape == env_space[key].shape
    assert spec.action_space.shape == (2,)
    assert set(spec.features(video=False)) >= {"observation.images.top", "observation.state", "action", "next.done"}
    with pytest.raises(FileNotFoundError, match="no LeRobotDataset"):
        dataset_spec(tmp_path)


@pytest.fixture(scope="module")
def eval_run(reach_dataset, tmp_path_factory):
    """`python -m vla_wmrl.eval_robot robot=vla_wmrl_sim policy_path=expert episodes=3`, composed as the CLI does."""
    out = tmp_path_factory.mktemp("eval_robot")
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        cfg = compose("eval_robot", overrides=[
            "robot=vla_wmrl_sim", f"robot.calibration_dir={out / 'calibration'}", "policy_path=expert",
            f"dataset={reach_dataset}", "episodes=3", "realtime=false", "episode_time_s=3", f"root={out / 'dataset'}"])
    summary = run(cfg, out)
    return out, summary


def test_eval_robot_writes_summary_and_a_dataset_lerobot_loads(eval_run):
    out, summary = eval_run
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["episodes"] == 3 and summary["stopped"] is None and summary["success_rate"] == 1.0
    ds = LeRobotDataset("local/eval_vla_wmrl_sim", root=out / "dataset")
    assert ds.meta.total_episodes == 3 and ds.fps == 20
    assert ds.features["action"]["names"] == ["shoulder.delta", "elbow.delta"]  # the robot's own motor keys
    ends = ds.meta.episodes["dataset_to_index"]
    lengths = np.diff([0, *ends])
    assert np.mean(lengths) == pytest.approx(summary["mean_length"])
    last = ds[int(ends[0]) - 1]
    assert bool(last["next.done"]) and bool(last["next.success"]) and float(last["next.reward"]) == 1.0
    assert ds[0]["observation.images.top"].shape == (3, 64, 64) and ds[0]["task"].startswith("reach the")


def test_lerobots_own_replay_tool_reproduces_a_recorded_episode_on_the_sim_robot(eval_run, tmp_path, monkeypatch):
    from lerobot.scripts.lerobot_replay import DatasetReplayConfig, ReplayConfig, replay

    import lerobot.scripts.lerobot_replay as lerobot_replay

    out, summary = eval_run
    built = []
    monkeypatch.setattr(lerobot_replay, "make_robot_from_config",
                        lambda cfg: built.append(make_robot_from_config(cfg)) or built[-1])
    robot_cfg = SimRobotConfig(calibration_dir=tmp_path, seed=0)  # eval episode 0 started from seed 0
    replay(ReplayConfig(robot=robot_cfg, dataset=DatasetReplayConfig(
        repo_id="local/eval_vla_wmrl_sim", episode=0, root=out / "dataset", fps=200), play_sounds=False))
    assert type(built[0]) is SimRobot and not built[0].is_connected
    assert built[0].is_success  # the recorded actions, replayed from the same seeded scene, succeed again


def test_anchor_episode_is_labelled_returned_and_recorded(robot, spec, tmp_path):
    env = RobotEnv(robot, spec, RobotEnvConfig(video=False, **FAST), record_root=tmp_path / "anchors")
    with env:
        expert = SimRobotExpert(robot)
        episode = env.run_episode(expert, seed=5)
        assert episode.seed == 5 and episode.success and episode.success == robot.is_success
        with sims.make_env("mujoco_reach") as scene:  # closed: an env left open fails to free EGL at exit
            first = scene.reset(seed=5)[0]  # the episode started from the seeded scene
        np.testing.assert_allclose(episode.frames[0]["observation.state"], first["observation.state"], atol=1e-6)
        assert episode.frames[0]["task"] == first["task"]
        assert [f["next.done"] for f in episode.frames] == [False] * (episode.length - 1) + [True]
        assert episode.frames[-1]["next.success"] and episode.ret == 1.0
    assert not robot.is_connected
    ds = LeRobotDataset("local/anchors", root=tmp_path / "anchors")
    assert ds.meta.total_episodes == 1 and ds.num_frames == episode.length
    np.testing.assert_allclose(ds[episode.length - 1]["action"].numpy(), episode.frames[-1]["action"])


def test_action_safety_clips_to_the_dataset_range_and_the_per_step_change():
    safety = ActionSafety(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), max_delta=0.5)
    np.testing.assert_allclose(safety(np.array([3.0, -1.0])), [1.0, 0.0])
    np.testing.assert_allclose(safety(np.array([3.0, 2.0]), previous=np.array([0.0, 1.0])), [0.5, 1.5])
    np.testing.assert_allclose(safety(np.array([-3.0, 2.0]), previous=np.array([np.nan, 1.8])), [-1.0, 2.0])


def test_safety_and_control_rate_are_applied_on_the_robot(robot, spec, tmp_path):
    cfg = RobotEnvConfig(fps=50, episode_time_s=0.2, realtime=True, action_margin=0.5, max_action_delta=0.1,
                         stop_when_robot_done=False, video=False)
    policy = ConstantPolicy([[5.0, -5.0], [-5.0, 5.0]])
    send, received = robot.send_action, []
    robot.send_action = lambda action: received.append(list(action.values())) or send(action)
    with RobotEnv(robot, spec, cfg, record_root=tmp_path / "safe") as env:
        t0 = time.perf_counter()
        episode = env.run_episode(policy)
        elapsed = time.perf_counter() - t0
    width = spec.action_max - spec.action_min
    lo, hi = spec.action_min - 0.5 * width, spec.action_max + 0.5 * width
    assert episode.length == 10 and elapsed >= 0.9 * 10 / 50  # 10 steps at 50 Hz: the control period is kept
    np.testing.assert_allclose(received[0], [hi[0], lo[1]], atol=1e-6)  # the dataset range (margin 0.5) first
    applied = np.stack([f["action"] for f in episode.frames])  # what the robot reports it applied (sim: [-1, 1])
    np.testing.assert_allclose(applied[0], [1.0, -1.0])
    np.testing.assert_allclose(received[1], [0.9, -0.9], atol=1e-6)  # then at most 0.1 from the applied action
    assert np.all(np.abs(np.asarray(received[1:]) - applied[:-1]) <= 0.1 + 1e-6)
    assert env.stats["clipped_steps"] == 10
    ds = LeRobotDataset("local/safe", root=tmp_path / "safe")
    np.testing.assert_allclose(ds[1]["action"].numpy(), applied[1])  # the dataset holds the applied actions


def test_failing_read_mid_episode_disconnects_and_keeps_finished_and_partial_episodes(robot, spec, tmp_path):
    env = RobotEnv(robot, spec, RobotEnvConfig(video=False, **FAST), record_root=tmp_path / "rec").connect()
    expert = SimRobotExpert(robot)
    for seed in range(2):
        env.run_episode(expert, seed=seed)
    read, calls = robot.get_observation, []

    def flaky():
        calls.append(1)
        if len(calls) > 3:
            raise ConnectionError("USB cable pulled")
        return read()

    robot.get_observation = flaky
    with pytest.raises(RobotStopped, match="get_observation failed: ConnectionError: USB cable pulled"):
        env.run_episode(expert, seed=2)
    assert not robot.is_connected and env.partial_episodes == [2]
    with pytest.raises(RobotStopped, match="not connected"):
        env.run_episode(expert)
    ds = LeRobotDataset("local/rec", root=tmp_path / "rec")
    assert ds.meta.total_episodes == 3
    assert list(np.diff([0, *ds.meta.episodes["dataset_to_index"]]))[2] == 3  # the 3 steps before the failure


def test_ctrl_c_mid_episode_stops_cleanly_and_the_summary_says_so(robot, spec, tmp_path):
    class Interrupting(SimRobotExpert):
        def act(self, obs, info):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 30:  # inside the second or third episode
                raise KeyboardInterrupt
            return super().act(obs, info)

    env = RobotEnv(robot, spec, RobotEnvConfig(video=False, **FAST), record_root=tmp_path / "rec").connect()
    summary = evaluate_robot(env, Interrupting(robot), episodes=10)
    assert summary["stopped"] == "interrupted by the operator (Ctrl-C)" and 1 <= summary["episodes"] < 10
    assert not robot.is_connected and len(summary["partial_episodes"]) == 1
    ds = LeRobotDataset("local/rec", root=tmp_path / "rec")
    assert ds.meta.total_episodes == summary["episodes"] + 1


def test_unresponsive_robot_ends_the_episode_with_a_clear_message(robot, spec):
    env = RobotEnv(robot, spec, RobotEnvConfig(realtime=False, episode_time_s=1.0, read_timeout_s=0.2)).connect()
    robot.get_observation = lambda: time.sleep(2.0)
    with pytest.raises(RobotStopped, match=r"robot unresponsive: get_observation did not return within 0.2 s"):
        env.run_episode(SimRobotExpert(robot))


def test_keyboard_operator_resets_and_labels_and_a_classifier_can_label_instead(robot, spec):
    answers = iter(["", "maybe", "n", "", "y"])
    prompts = []

    def fake_input(prompt):
        prompts.append(prompt)
        return next(answers)

    env = RobotEnv(robot, spec, RobotEnvConfig(**FAST), operator=KeyboardOperator(fake_input)).connect()
    policy = ConstantPolicy([[0.0, 0.0]])
    assert env.run_episode(policy).success is False
    assert "reset the scene" in prompts[0] and "success? [y/n]" in prompts[1] and len(prompts) == 3
    assert env.run_episode(policy).success is True
    env.success_fn = lambda episode: episode.length == env.max_steps
    answers = iter([""])
    assert env.run_episode(policy).success is True and policy.resets == 3
    env.close()


def test_feature_mismatch_fails_at_connection_naming_both_sides(robot, spec):
    wrist = dataclasses.replace(spec, cameras=("top", "wrist"),
                                image_shapes={"top": (64, 64, 3), "wrist": (64, 64, 3)})
    with pytest.raises(ValueError) as err:
        RobotEnv(robot, wrist).connect()
    msg = str(err.value)
    assert "missing camera(s) ['wrist']" in msg and "robot cameras: ['top']" in msg
    assert "robot observation features:" in msg and "dataset: cameras" in msg
    seven = dataclasses.replace(spec, action_dim=7, action_min=-np.ones(7), action_max=np.ones(7))
    with pytest.raises(ValueError, match=r"action dimension: the robot has 2 \(\['shoulder.delta', 'elbow.delta'\]\), "
                                         r"the dataset 7"):
        RobotEnv(robot, seven).connect()
    named = dataclasses.replace(spec, state_names=["shoulder_pan.pos"] * 12)
    with pytest.raises(ValueError, match=r"observation.state entries \['shoulder_pan.pos'"):
        RobotEnv(robot, named).connect()
    assert not robot.is_connected


def test_robot_configs_compose_into_lerobot_robot_configs():
    from lerobot.cameras.opencv import OpenCVCameraConfig

    for name in ("vla_wmrl_sim", "so101_follower"):
        with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
            cfg = compose("eval_robot", overrides=[f"robot={name}", "policy_path=p", "dataset=d", "root=r",
                                                   "robot.id=test"])
        from omegaconf import OmegaConf

        robot_cfg = robot_config(OmegaConf.to_container(cfg.robot, resolve=True))
        assert type(robot_cfg) is RobotConfig.get_choice_class(name) and robot_cfg.id == "test"
    assert robot_cfg.port == "/dev/ttyACM0" and isinstance(robot_cfg.cameras["front"], OpenCVCameraConfig)
    with pytest.raises(ValueError, match="registered robot types: .*so101_follower.*vla_wmrl_sim"):
        robot_config({"type": "so999"})
