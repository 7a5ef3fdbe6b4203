"""Environments: observation contract, seeded determinism, save/restore, bad input, experts, vector execution."""

import numpy as np
import pytest

import sims
from sims.experts import make_expert

FAST = ["mujoco_reach"]
ROBOSUITE = ["robosuite_lift", "robosuite_stack"]


@pytest.fixture(scope="module", params=FAST + ROBOSUITE)
def env(request):
    e = sims.make_env(request.param)
    e.name = request.param
    yield e
    e.close()


def _rollout(env, seed, actions):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        out.append(env.step(a)[0])
    return out


def test_observation_contract(env):
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs), {k: getattr(v, "shape", v) for k, v in obs.items()}
    img_keys = [k for k in obs if k.startswith("observation.images.")]
    assert len(img_keys) == 1
    img = obs[img_keys[0]]
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    assert img.std() > 5, "camera image is blank"
    assert obs["observation.state"].dtype == np.float32
    assert isinstance(obs["task"], str) and len(obs["task"]) > 5
    assert set(info) >= {"is_success", "sim_unstable", "privileged"}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)


def test_seeded_reset_is_reproducible(env):
    rng = np.random.default_rng(0)
    actions = [env.action_space.sample() * 0 + rng.uniform(-1, 1, env.action_space.shape) for _ in range(3)]
    a, b = _rollout(env, 7, actions), _rollout(env, 7, actions)
    for oa, ob in zip(a, b):
        np.testing.assert_array_equal(oa["observation.state"], ob["observation.state"])
        assert all(np.array_equal(oa[k], ob[k]) for k in oa if k.startswith("observation.images."))
    c = _rollout(env, 8, actions[:0])
    assert not np.array_equal(a[0]["observation.state"], c[0]["observation.state"]) or env.name == "robosuite_stack" \
        or not np.array_equal(a[0][next(k for k in a[0] if "images" in k)], c[0][next(k for k in c[0] if "images" in k)])


def test_save_restore_gives_identical_next_observation(env):
    env.reset(seed=3)
    for _ in range(3):
        env.step(env.action_space.sample())
    state = env.get_state()
    action = np.full(env.action_space.shape, 0.5, dtype=np.float32)
    first = [env.step(action)[0] for _ in range(3)]
    for _ in range(4):  # wander off, then restore
        env.step(env.action_space.sample())
    env.set_state(state)
    second = [env.step(action)[0] for _ in range(3)]
    for o1, o2 in zip(first, second):
        np.testing.assert_allclose(o1["observation.state"], o2["observation.state"], atol=1e-6)


def test_unknown_sim_lists_valid_names():
    with pytest.raises(ValueError, match="valid sims: .*robosuite_lift"):
        sims.make_env("robosuite_lfit")


@pytest.mark.parametrize("name", FAST + ["robosuite_lift"])
def test_bad_camera_and_size_fail_at_construction(name):
    with pytest.raises(ValueError, match="unknown camera.*valid cameras"):
        sims.make_env(name, cameras=("nope",))
    with pytest.raises(ValueError, match="image_size"):
        sims.make_env(name, image_size=0)


def test_unstable_physics_ends_episode_with_flag():
    env = sims.make_env("mujoco_reach")
    env.reset(seed=0)
    env.data.qvel[:] = np.nan  # what a blown-up simulation looks like
    obs, reward, terminated, truncated, info = env.step(np.zeros(2, np.float32))
    assert terminated and info["sim_unstable"] and not info["is_success"]
    assert np.isfinite(obs["observation.state"]).all()
    env.close()


def _expert_success(name, episodes, seed0=0):
    env = sims.make_env(name)
    expert = make_expert(name)
    wins = 0
    for k in range(episodes):
        obs, info = env.reset(seed=seed0 + k)
        expert.reset()
        for _ in range(env.horizon):
            obs, r, term, trunc, info = env.step(expert.act(info["privileged"]))
            if term or trunc:
                break
        wins += info["is_success"]
    env.close()
    return wins / episodes


def test_reach_expert_succeeds():
    assert _expert_success("mujoco_reach", 10) >= 0.9


def test_reach_state_holds_everything_the_expert_acts_on():
    """The reach expert's action is a function of (observation.state, task): the state carries the joint set-points
    it moves and both targets in a fixed order (red, blue), so only the instruction tells which target is meant."""
    from sims.mujoco_reach import STATE_NAMES, ReachExpert

    env = sims.make_env("mujoco_reach", cameras=())
    expert = ReachExpert()
    colours = set()
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        for _ in range(3):
            state, task = obs["observation.state"], obs["task"]
            assert state.shape == (len(STATE_NAMES),)
            np.testing.assert_allclose(state[6:8], info["privileged"]["ctrl"], atol=1e-6)
            red, blue = state[8:10], state[10:12]
            named = red if "red" in task else blue
            colours.add("red" if "red" in task else "blue")
            np.testing.assert_allclose(named, info["privileged"]["target"], atol=1e-6)
            from_obs = ReachExpert().act({"ctrl": state[6:8].astype(np.float64), "target": named.astype(np.float64)})
            np.testing.assert_allclose(from_obs, expert.act(info["privileged"]), atol=1e-4)
            obs, _, _, _, info = env.step(expert.act(info["privileged"]))
    assert colours == {"red", "blue"}
    env.close()


def test_lift_expert_succeeds():
    assert _expert_success("robosuite_lift", 5) >= 0.8


@pytest.mark.slow
def test_lift_expert_90_percent_over_50_seeds():
    assert _expert_success("robosuite_lift", 50) >= 0.9


def test_vector_env_runs_seeded_episodes():
    from vla_wmrl.rollout import ExpertPolicy, run_episodes

    envs = sims.make_vector_env("mujoco_reach", 2)
    try:
        eps = list(run_episodes(envs, ExpertPolicy("mujoco_reach", 2), seeds=[10, 11, 12]))
    finally:
        envs.close()
    assert sorted(e.seed for e in eps) == [10, 11, 12]
    assert all(e.success and e.frames[-1]["next.done"] for e in eps)
    # a worker process gives the same episode as this process for the same seed
    single = sims.make_env("mujoco_reach")
    obs, _ = single.reset(seed=11)
    ep11 = next(e for e in eps if e.seed == 11)
    np.testing.assert_array_equal(obs["observation.state"], ep11.frames[0]["observation.state"])


class Still:
    """A rollout policy that never moves (mujoco_reach's 2-D actions): episodes run to the horizon."""

    def act(self, obs, info):
        return np.zeros((len(obs["task"]), 2), np.float32)

    def reset(self, mask, episodes):
        pass


@pytest.mark.parametrize("asynchronous", [True, False])
def test_run_episodes_refills_only_as_many_workers_as_seeds_remain(asynchronous):
    """Both workers end on the same step (fixed horizon) with one seed left: one refill, the other worker idles
    while the last episode runs; no crash, in worker processes or in this one."""
    from vla_wmrl.rollout import run_episodes

    envs = sims.make_vector_env("mujoco_reach", 2, asynchronous=asynchronous, horizon=3)
    try:
        eps = list(run_episodes(envs, Still(), seeds=[1, 2, 3]))
    finally:
        envs.close()
    assert sorted(e.seed for e in eps) == [1, 2, 3] and all(e.length == 3 for e in eps)


def test_max_steps_ends_episodes_early_in_workers_that_keep_their_own_horizon():
    """One set of workers serves WMRL's short training rollouts and the task-length evaluation."""
    from vla_wmrl.rollout import run_episodes

    envs = sims.make_vector_env("mujoco_reach", 2, horizon=9)
    try:
        one = list(run_episodes(envs, Still(), seeds=[7], max_steps=4))  # fresh workers, fewer seeds than workers
        short = list(run_episodes(envs, Still(), seeds=[1, 2, 3], max_steps=4))
        full = list(run_episodes(envs, Still(), seeds=[1, 2, 3]))
        each = list(run_episodes(envs, Still(), seeds=[1, 2, 3], max_steps=[2, None, 5]))  # one limit per seed
        with pytest.raises(ValueError, match="2 max_steps for 3 seeds"):
            list(run_episodes(envs, Still(), seeds=[1, 2, 3], max_steps=[2, 5]))
    finally:
        envs.close()
    assert [(e.seed, e.length) for e in one] == [(7, 4)]
    assert sorted((e.seed, e.length) for e in each) == [(1, 2), (2, 9), (3, 5)]
    assert [e.length for e in short] == [4, 4, 4] and all(e.frames[-1]["next.done"] for e in short)
    assert not any(f["next.done"] for e in short for f in e.frames[:-1])
    assert [e.length for e in full] == [9, 9, 9]
    for a, b in zip(sorted(short, key=lambda e: e.seed), sorted(full, key=lambda e: e.seed)):  # same start, same path
        np.testing.assert_array_equal(a.frames[3]["observation.state"], b.frames[3]["observation.state"])


@pytest.mark.parametrize("name", ROBOSUITE)
def test_separately_built_envs_simulate_the_same_episode(name):
    """robosuite draws object sizes once per construction (Lift's cube edge in [0.020, 0.022] m); two workers or two
    runs must still play a seeded episode identically, or evaluations of one policy on one seed list disagree."""
    np.random.seed(123)  # a different global state before each construction must not matter
    a = sims.make_env(name, cameras=())
    np.random.seed(456)
    b = sims.make_env(name, cameras=())
    try:
        actions = np.random.default_rng(0).uniform(-1, 1, (20, 7))
        for x, y in zip(_rollout(a, 5, actions), _rollout(b, 5, actions)):
            np.testing.assert_array_equal(x["observation.state"], y["observation.state"])
        ia, ib = a.reset(seed=5)[1]["privileged"], b.reset(seed=5)[1]["privileged"]
        for key in ia:
            np.testing.assert_array_equal(ia[key], ib[key], err_msg=key)
    finally:
        a.close()
        b.close()


def test_replayed_action_sequences_reproduce_recorded_episodes():
    """ReplayPolicy + a seeded simulator reproduce recorded episodes exactly, repeated seeds included (what
    benchmarks/imagination_fidelity.py relies on to score imagined action sequences in the simulator)."""
    from vla_wmrl.rollout import ExpertPolicy, ReplayPolicy, run_episodes

    seeds = [10, 10, 11, 11, 12]  # noisy expert: one start state, different actions
    envs = sims.make_vector_env("mujoco_reach", 2)
    try:
        recorded = list(run_episodes(envs, ExpertPolicy("mujoco_reach", 2, noise=1.0, seed=3), seeds))
        recorded.sort(key=lambda e: seeds.index(e.seed))  # group by seed, in seed order
        sequences = [np.stack([f["action"] for f in e.frames]) for e in recorded]
        replayed = list(run_episodes(envs, ReplayPolicy(sequences, 2), [e.seed for e in recorded]))
    finally:
        envs.close()
    assert not np.array_equal(sequences[0][:5], sequences[1][:5])  # same start state, different actions
    for rec in recorded:
        match = [e for e in replayed if e.seed == rec.seed and e.length == rec.length and np.array_equal(
            np.stack([f["action"] for f in e.frames]), np.stack([f["action"] for f in rec.frames]))]
        assert len(match) == 1
        assert match[0].success == rec.success
        np.testing.assert_array_equal(np.stack([f["observation.state"] for f in match[0].frames]),
                                      np.stack([f["observation.state"] for f in rec.frames]))


@pytest.mark.parametrize("name", ["mujoco_reach", "robosuite_lift"])
def test_replays_without_cameras_render_nothing_and_keep_the_outcomes(name):
    """SimExecutor.replay(cameras=False) (the trainer's check replays): the same states, successes and lengths as
    with cameras, black frames, no rendering (robosuite's camera observable is off), and cameras back on after."""
    from sims.base import image_key
    from vla_wmrl.config import SimConfig
    from vla_wmrl.executors import SimExecutor
    from vla_wmrl.rollout import ExpertPolicy

    single = sims.make_env(name)
    try:
        single.set_cameras_enabled(False)
        obs, _ = single.reset(seed=3)
        images = [k for k in obs if k.startswith("observation.images.")]
        assert images and not any(obs[k].any() for k in images) and single.observation_space.contains(obs)
        # nothing was rendered
        assert not any(k.endswith("_image") for k in single._raw) if name.startswith("robosuite") else (
            single._renderer is None)
        with pytest.raises(RuntimeError, match="rendering is off"):
            single.render()
        single.step(single.action_space.sample())
        single.set_cameras_enabled(True)  # mid-episode: the current frame at once
        assert single.render().std() > 5 and all(single.step(single.action_space.sample())[0][k].std() > 5
                                                  for k in images)
        obs, _ = single.reset(seed=3)
        assert all(obs[k].std() > 5 for k in images)
    finally:
        single.close()

    camera = "top" if name == "mujoco_reach" else "agentview"
    executor = SimExecutor(SimConfig(name=name, cameras=[camera], horizon=30), horizon=30, num_envs=2)
    try:
        seeds = [4, 4, 5]
        recorded = executor.run(ExpertPolicy(name, 2, noise=0.5, seed=1), seeds)
        sequences = [np.stack([f["action"] for f in e.frames]) for e in recorded]
        lit = executor.replay(sequences, seeds)
        dark = executor.replay(sequences, seeds, cameras=False, max_steps=[30, 10, 30])
        after = executor.replay(sequences[:1], seeds[:1])
    finally:
        executor.close()
    image = image_key(camera)
    assert [e.length for e in dark] == [lit[0].length, min(10, lit[1].length), lit[2].length]
    assert [e.success for e in dark[::2]] == [e.success for e in lit[::2]]
    for a, b in zip(lit, dark):
        assert not any(f[image].any() for f in b.frames)
        for key in ("observation.state", "next.success", "next.reward"):
            np.testing.assert_array_equal([f[key] for f in a.frames[:b.length]], [f[key] for f in b.frames])
    assert all(f[image].std() > 5 for f in after[0].frames)  # the workers render again
