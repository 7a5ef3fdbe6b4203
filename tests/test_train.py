"""The whole pipeline, shrunk (`+experiment=debug` on `mujoco_reach`): every stage runs for real, end to end."""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize

from vla_wmrl import train
from vla_wmrl.stages import location_free


def _cfg(tmp_path, *overrides):
    with initialize(config_path="../configs", version_base="1.3"):
        return compose("train", overrides=["sim=mujoco_reach", "+experiment=debug", f"cache_dir={tmp_path / 'cache'}",
                                           "wmrl.eval_episodes=2", "wmrl.updates=2", *overrides])


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    cfg = _cfg(tmp)
    return tmp, train.run(cfg, tmp / "run")


def _record_calls(monkeypatch, owner, name: str) -> list:
    """Wrap the method ``owner.name`` so every call still runs; returns the list each call's (positional arguments
    after self, result) is appended to."""
    calls, real = [], getattr(owner, name)

    def wrapper(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        calls.append((args, out))
        return out

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def test_debug_pipeline_runs_every_stage(debug_run):
    tmp, summary = debug_run
    run = tmp / "run"
    assert summary["updates"] == 2 and summary["mode"] == "wmrl"
    assert summary["real_env_steps"] > 0  # anchor groups were executed in the simulator
    # warm-up + 2 updates, one real group of 4 each, at wmrl.horizon=20 steps, though the workers' horizon is the
    # task's 50 for the evaluations
    assert summary["eval_horizon"] == 50 and summary["real_env_steps"] <= 3 * 4 * 20
    assert 0.0 <= summary["final_success_rate"] <= 1.0
    assert json.loads((run / "summary.json").read_text())["updates"] == 2
    assert (run / "policy" / "config.json").exists() and (run / "checkpoint" / "corrector.json").exists()
    assert list((run / "videos").rglob("real_imagined_*.mp4")), "no real | imagined video written"
    assert list((run / "tensorboard").glob("events.*"))
    # the warm-up group and each update's anchor group were also imagined closed-loop and checked against reality
    assert summary["correction_stats"]["n_gap_obs"] == 3
    stages = sorted(p.name.split("-")[0] for p in (tmp / "cache").iterdir())
    assert stages == ["demos", "noisy", "policy_rollouts", "sft", "world_model"]
    spec = json.loads(next((tmp / "cache").glob("world_model-*/spec.json")).read_text())
    assert any("policy_rollouts" in d for d in spec["datasets"])  # the BC policy's rollouts train the world model


def test_seed_diagnostics_read_the_runs_correction_scalars(debug_run):
    """benchmarks/wmrl_seeds.py --diagnostics: per-run means of the correction's TensorBoard scalars."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wmrl_seeds", Path(__file__).parents[1] / "benchmarks/wmrl_seeds.py")
    seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seeds)
    tmp, summary = debug_run
    diag = seeds.run_diagnostics(tmp / "run")
    assert 1.0 <= diag["correction/anchor_weight"] <= 4.0
    assert 0.0 <= diag["correction/imagination_trust"] <= 1.0 and 0.0 <= diag["trust_below_half"] <= 1.0
    assert 0.0 <= diag["train/anchor_success"] <= 1.0
    assert 0.0 <= diag["train/anchor_update_share"] <= 1.0  # the anchor group's part of |weight x advantage|
    # where an update's time goes: collection is part of the update, the rest is the GRPO step and the correction
    assert 0.0 < diag["train/collect_seconds"] < diag["train/update_seconds"]
    assert diag["train/update_minus_collect_seconds"] > 0.0
    assert diag["train/real_steps_per_s"] > 0 and diag["train/imagined_steps_per_s"] > 0
    assert seeds.run_diagnostics(tmp / "no_such_run") == {}
    # trends: the first and the last quarter of the updates (here one update each); a gap is a difference of rates
    assert all(-1.0 <= diag[f"correction/imagination_gap_{q}_quarter"] <= 1.0 for q in ("first", "last"))
    assert 0.0 <= diag["train/anchor_success_last_quarter"] <= 1.0
    assert seeds.quarter_means([0, 1, 2, 3, 4, 5, 6, 7]) == (0.5, 6.5)  # two values per quarter
    assert seeds.quarter_means([1, 2, 3]) == (1.0, 3.0)  # fewer than four: the first and the last value


def test_stages_are_reused_and_run_resumes(debug_run):
    tmp, first = debug_run
    stamps = {p: (p / "DONE").stat().st_mtime for p in (tmp / "cache").iterdir()}
    # a checkpoint whose encoder trained cannot resume with it frozen (the optimiser holds other parameters)
    with pytest.raises(ValueError, match="trained with algo.freeze_encoder=false"):
        train.run(_cfg(tmp, "wmrl.updates=3", "resume=true", "algo.freeze_encoder=true"), tmp / "run")
    cfg = _cfg(tmp, "wmrl.updates=3", "resume=true")
    summary = train.run(cfg, tmp / "run")  # same run dir: continues from the checkpoint at update 2
    assert summary["updates"] == 3
    assert [h["update"] for h in summary["history"]][:2] == [h["update"] for h in first["history"]][:2]
    assert {p: (p / "DONE").stat().st_mtime for p in (tmp / "cache").iterdir()} == stamps  # nothing re-ran


def test_stage_names_do_not_depend_on_where_the_cache_lives(debug_run, tmp_path):
    assert location_free({"demos": "c/demos-1/dataset", "data": ["c/a", "/ext/d", "c_other/x"], "n": 3}, "c") == {
        "demos": "cache/demos-1/dataset", "data": ["cache/a", "/ext/d", "c_other/x"], "n": 3}
    assert location_free({"p": "cache/sft-1"}, "cache") == {"p": "cache/sft-1"}  # default root: names unchanged
    tmp, _ = debug_run
    moved = tmp_path / "elsewhere" / "my_cache"
    shutil.copytree(tmp / "cache", moved)
    names = sorted(p.name for p in moved.iterdir())
    cfg = _cfg(tmp, f"cache_dir={moved}", "wmrl.updates=1", "wmrl.groups=2", "wmrl.group_size=2")
    train.run(cfg, tmp_path / "run")
    assert sorted(p.name for p in moved.iterdir()) == names  # every stage found under its old name: none re-ran


def test_sim_baseline_runs_in_the_same_code_path(debug_run, tmp_path):
    tmp, _ = debug_run
    cfg = _cfg(tmp, "wmrl.mode=sim", "wmrl.updates=1", "wmrl.groups=2", "wmrl.group_size=2")
    summary = train.run(cfg, tmp_path / "sim")
    assert summary["mode"] == "sim" and summary["world_model"] is None
    assert summary["real_env_steps"] > 0


def test_benchmark_gives_simulator_rl_a_multiple_of_the_wmrl_time_measured_first(debug_run, tmp_path, monkeypatch):
    """benchmarks/wmrl_vs_sim.py --budget-from wmrl_both --budget-fraction 3: WMRL runs first at its configured updates,
    then simulator RL's RL budget (wmrl.max_minutes) is 3x the RL seconds WMRL just took on this machine."""
    import runpy
    import sys

    tmp, _ = debug_run
    out = tmp_path / "bench"
    monkeypatch.setattr(sys, "argv", [
        "wmrl_vs_sim.py", "--arms", "sim", "wmrl_both", "--budget-from", "wmrl_both", "--budget-fraction", "3",
        "--out", str(out), "--", "sim=mujoco_reach", "+experiment=debug", f"cache_dir={tmp / 'cache'}",
        "wmrl.eval_episodes=2", "wmrl.updates=1", "wmrl.eval_every=0"])
    runpy.run_path(str(Path(__file__).parent.parent / "benchmarks" / "wmrl_vs_sim.py"), run_name="__main__")
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["wmrl_both", "sim"]  # the clock ran first, whatever the order on the command line
    assert results["wmrl_both"]["updates"] == 1 and "wmrl.updates=1" in results["wmrl_both"]["overrides"]
    budget = 3 * results["wmrl_both"]["rl_seconds"] / 60
    assert f"wmrl.max_minutes={budget:.4f}" in results["sim"]["overrides"]
    assert "wmrl.updates=1000" in results["sim"]["overrides"]  # the budget, not the update count, ends it
    assert (out / "table.json").exists() and (out / "success_curves.png").exists()


@pytest.mark.parametrize("freeze", ["true", "backbone"])
def test_a_frozen_encoder_run_keeps_the_behaviour_cloned_encoder_and_trains_the_head(debug_run, tmp_path, freeze):
    from safetensors.torch import load_file

    tmp, _ = debug_run
    summary = train.run(_cfg(tmp, "wmrl.updates=1", f"algo.freeze_encoder={freeze}"), tmp_path / "frozen")
    assert summary["updates"] == 1
    sft = load_file(str(next((tmp / "cache").glob("sft-*/pretrained_model/model.safetensors"))))
    after = load_file(str(tmp_path / "frozen" / "policy" / "model.safetensors"))
    trained = ("mean_head.weight", "image_encoder.proj.1.weight") if freeze == "backbone" else ("mean_head.weight",)
    for name, value in sft.items():
        frozen = name.startswith(("image_encoder.", "text_encoder.")) and not (
            freeze == "backbone" and name.startswith("image_encoder.proj."))
        if frozen:
            assert torch.equal(after[name], value), name
    for name in trained:
        assert not torch.equal(after[name], sft[name]), name


def test_unknown_mode_and_mismatched_world_model_fail_before_training(debug_run, tmp_path):
    tmp, summary = debug_run
    with pytest.MonkeyPatch.context() as mp:  # each fails before any stage runs
        mp.setattr(train, "stage_data", lambda *a, **k: pytest.fail("a stage ran before the config was checked"))
        for override, message in (
                ("wmrl.mode=dreamer", r"wmrl.mode 'dreamer'; valid: \['wmrl', 'sim', 'wm'\]"),
                ("wmrl.score=mean", r"wmrl.score 'mean'; valid: \['final', 'max'\]"),
                ("wmrl.anchor_mode=open", r"wmrl.anchor_mode 'open'; valid: \['closed_loop', 'replay'\]"),
                ("wmrl.imagine_from=video", r"wmrl.imagine_from 'video'; valid: \['reset', 'real'\]"),
                ("wmrl.wm_finetune_success_frac=2", r"wm_finetune_success_frac must be in \[0, 1\]"),
                ("pipeline.wm_precision=fp16", r"pipeline.wm_precision 'fp16'; valid: \['fp32', 'bf16'\]")):
            with pytest.raises(ValueError, match=message):
                train.run(_cfg(tmp, override), tmp_path / "bad1")
    with pytest.raises(ValueError, match=r"64, 64.*32, 32|world model 64 px vs sim 32 px"):
        train.run(_cfg(tmp, f"world_model_path={summary['world_model']}", f"policy_path={summary['sft_policy']}",
                       "sim.image_size=32"), tmp_path / "bad2")


def test_imagined_groups_can_branch_from_real_rollouts(debug_run, tmp_path, monkeypatch):
    """imagine_from=real: after the first anchors, imagined groups start at frames of real rollouts, and run at most
    imagine_horizon steps."""
    tmp, _ = debug_run
    starts, horizons = [], []
    real_imagine = train.imagine

    def spy(env, adapter, start, horizon, **kw):
        starts.append(start)
        horizons.append(horizon)
        return real_imagine(env, adapter, start, horizon, **kw)

    monkeypatch.setattr(train, "imagine", spy)
    pool = []
    monkeypatch.setattr(train.WMRLTrainer, "imagined_starts", lambda self, seeds: (
        pool.append([r.images[self.image_keys[0]] for r in self.recent_real[-self.cfg.branch_pool:]]),
        _original_starts(self, seeds))[1])
    summary = train.run(_cfg(tmp, "wmrl.imagine_from=real", "wmrl.imagine_horizon=7",
                             "correction.anchor_fraction=0.5", "wmrl.warmup_groups=0"), tmp_path / "branch")
    assert summary["updates"] == 2 and horizons == [7, 7]
    assert not pool[0]  # the first update has no real rollouts yet: seeded resets
    frames = np.concatenate(pool[1])  # every frame of the real rollouts branched from
    first = starts[1]["observation.images.top"][0]
    assert (frames == first).all(axis=(1, 2, 3)).any(), "the branch start is not a frame of a real rollout"
    with pytest.raises(ValueError, match="valid"):
        train.run(_cfg(tmp, "wmrl.imagine_from=dream"), tmp_path / "bad")


_original_starts = train.WMRLTrainer.imagined_starts


def test_warmup_runs_the_starting_policy_for_real_and_fine_tunes_the_world_model(debug_run, tmp_path):
    """wmrl.warmup_groups: real groups of the BC policy before update 1; their steps are counted, their pairs reach
    the calibrator, and the world model is fine-tuned on them (debug fine-tunes only every 2 updates: with one update,
    any change to the world model's weights is the warm-up's)."""
    from safetensors.torch import load_file

    tmp, first = debug_run
    common = ("wmrl.updates=1", "wmrl.groups=2", "correction.anchor_fraction=0.5", "correction.max_anchors=1")
    plain = train.run(_cfg(tmp, *common, "wmrl.warmup_groups=0"), tmp_path / "plain")
    warm = train.run(_cfg(tmp, *common, "wmrl.warmup_groups=2", "wmrl.warmup_wm_steps=3"), tmp_path / "warm")
    G, horizon = 4, 20  # debug group size and horizon
    assert warm["real_env_steps"] - plain["real_env_steps"] >= 2 * G  # two warm-up groups of >= 1 step each
    assert warm["real_env_steps"] <= plain["real_env_steps"] + 2 * G * horizon
    assert warm["correction_stats"]["n_pairs"] == plain["correction_stats"]["n_pairs"] + 2 * G
    before = load_file(str(Path(first["world_model"]) / "model.safetensors"))
    for run, changed in (("plain", False), ("warm", True)):
        after = load_file(str(tmp_path / run / "checkpoint" / "world_model" / "model.safetensors"))
        assert any(not (after[k] == before[k]).all() for k in before) == changed, run


def test_warmup_trains_the_policy_and_the_rl_budget_stops_updates(debug_run, tmp_path, monkeypatch):
    """wmrl.warmup_train: the warm-up's real groups make a GRPO update; wmrl.max_minutes: no update starts past the
    budget (here the warm-up alone spends it), and the policy trained so far is still evaluated and saved; resuming
    that run continues it without repeating the base evaluation or the warm-up."""
    from safetensors.torch import load_file

    tmp, _ = debug_run
    group_scores = train._group_scores

    def mixed_outcomes(groups):  # the debug policy never reaches: give the warm-up group a learning signal
        pred, var, real = group_scores(groups)
        return pred, var, np.resize([1.0, 0.0], real.shape)

    monkeypatch.setattr(train, "_group_scores", mixed_outcomes)
    common = ("wmrl.warmup_groups=1", "wmrl.eval_every=0")
    frozen = train.run(_cfg(tmp, *common, "wmrl.warmup_train=false", "wmrl.updates=0"), tmp_path / "frozen")
    warm = train.run(_cfg(tmp, *common, "wmrl.updates=3", "wmrl.max_minutes=1e-6"), tmp_path / "budget")
    assert frozen["updates"] == 0 and warm["updates"] == 0 and warm["updates_planned"] == 3
    assert warm["rl_seconds"] > 0 and warm["history"][-1]["train_seconds"] == warm["rl_seconds"]
    assert len(warm["history"]) == 2  # base, then the warm-up-trained policy
    a = load_file(str(tmp_path / "frozen" / "policy" / "model.safetensors"))
    b = load_file(str(tmp_path / "budget" / "policy" / "model.safetensors"))
    assert any(not (a[k] == b[k]).all() for k in a), "the warm-up update did not change the policy"

    # resume=true continues the budget-stopped run: no second base evaluation or warm-up, its steps kept
    calls = {"warmup": 0, "evaluate": 0}
    for name in calls:
        def counted(self, *args, _real=getattr(train.WMRLTrainer, name), _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(train.WMRLTrainer, name, counted)
    resumed = train.run(_cfg(tmp, *common, "wmrl.updates=1", "resume=true"), tmp_path / "budget")
    assert calls == {"warmup": 0, "evaluate": 1} and resumed["updates"] == 1
    assert resumed["history"][:2] == warm["history"] and resumed["history"][2]["update"] == 1
    assert resumed["real_env_steps"] > warm["real_env_steps"] and resumed["rl_seconds"] > warm["rl_seconds"]


def test_whole_run_budget_leaves_the_final_evaluation_its_time(debug_run, tmp_path):
    """max_minutes bounds the whole run: with the stages (cached here) past it, no warm-up or update starts, and the
    base policy is still evaluated, saved and reported; the pace rule refuses an update that would not fit."""
    from types import SimpleNamespace

    tmp, _ = debug_run
    spent = train.run(_cfg(tmp, "wmrl.warmup_groups=1", "max_minutes=1e-6"), tmp_path / "spent")
    assert spent["updates"] == 0 and spent["real_env_steps"] == 0 and spent["max_minutes"] == 1e-6
    assert len(spent["history"]) == 1 and (tmp_path / "spent" / "policy" / "model.safetensors").exists()

    trainer = SimpleNamespace(cfg=SimpleNamespace(max_minutes=None), update_seconds=[], warmup_seconds=30.0,
                              train_seconds=100.0)
    trainer.budget_left = left = functools.partial(train.WMRLTrainer.budget_left, trainer)  # the bar shows it too
    stops = functools.partial(train.WMRLTrainer.out_of_time, trainer)
    assert stops(29.0) and not stops(31.0) and not stops(None)  # before the first update: the warm-up's pace
    trainer.update_seconds = [5.0, 20.0, 8.0, 9.0]  # then the slowest of the last three
    assert stops(19.0) and not stops(21.0)
    trainer.cfg.max_minutes = 121.0 / 60  # the RL budget (wmrl.max_minutes) applies on its own: 100 s spent + 20
    assert not stops(None) and not stops(1e9)
    trainer.cfg.max_minutes = 119.0 / 60
    assert stops(None) and stops(1e9)
    assert left(None) == pytest.approx(19.0) and left(7.0) == 7.0
    trainer.cfg.max_minutes = None
    assert left(None) is None and left(7.0) == 7.0


def test_rollout_score_final_ignores_spurious_peaks_of_failed_rollouts():
    from vla_wmrl.imagination import _pick

    # Two rollouts over 5 steps: a failure with a spurious mid-rollout peak (runs to the horizon), and a success that
    # ended at step 3 (-1 marks steps after its end).
    probs = np.array([[0.01, 0.02], [0.45, 0.10], [0.02, 0.70], [0.01, -1.0], [0.00, -1.0]])
    lengths = np.array([5, 3])
    final, peak = _pick(probs, lengths, "final"), _pick(probs, lengths, "max")
    assert probs[final, [0, 1]].tolist() == [0.0, 0.7]
    assert probs[peak, [0, 1]].tolist() == [0.45, 0.7]
    with pytest.raises(ValueError, match="valid"):
        _pick(probs, lengths, "mean")


def test_untrusted_imagination_runs_the_anchor_groups_alone(debug_run, tmp_path, monkeypatch):
    """When the imagination gap has switched the imagined stream off (trust 0), an update imagines nothing but the
    anchors' check, and trains on the anchor groups."""
    from vla_wmrl.correction import RewardCorrector

    tmp, _ = debug_run
    monkeypatch.setattr(RewardCorrector, "imagination_trust", property(lambda self: 0.0))
    sizes, real_collect = [], train.WMRLTrainer.collect_groups

    def spy(self, seeds, anchors):
        sizes.append((len(seeds), int(np.sum(anchors))))
        return real_collect(self, seeds, anchors)

    monkeypatch.setattr(train.WMRLTrainer, "collect_groups", spy)
    summary = train.run(_cfg(tmp, "wmrl.warmup_groups=0"), tmp_path / "untrusted")
    assert sizes == [(1, 1), (1, 1)]  # debug: 4 groups, 1 anchor per update
    assert summary["real_env_steps"] > 0 and summary["updates"] == 2


def test_shuffled_advantages_null_control_permutes_the_update_signal(debug_run, tmp_path, monkeypatch):
    """wmrl.shuffle_advantages (a null control) hands GRPO the corrector's advantages permuted across the valid
    rollouts: the same values, assigned at random."""
    from vla_wmrl.algos.grpo import GRPO
    from vla_wmrl.correction import RewardCorrector

    tmp, _ = debug_run
    produced, used = [], []
    real_process, real_update = RewardCorrector.process, GRPO.update

    def spy_process(self, *args, **kwargs):
        out = real_process(self, *args, **kwargs)
        # Distinct values, so a reordering shows (the debug policy's groups often all succeed or all fail).
        out.advantages = np.where(out.valid, np.arange(out.valid.size).reshape(out.valid.shape) + 1.0, 0.0)
        produced.append((out.advantages.reshape(-1).copy(), out.valid.reshape(-1).copy()))
        return out

    def spy_update(self, steps, advantages, weights, *args, **kwargs):
        used.append(np.asarray(advantages).copy())
        return real_update(self, steps, advantages, weights, *args, **kwargs)

    monkeypatch.setattr(RewardCorrector, "process", spy_process)
    monkeypatch.setattr(GRPO, "update", spy_update)
    train.run(_cfg(tmp, "wmrl.mode=sim", "wmrl.updates=3", "wmrl.groups=2", "wmrl.group_size=4",
                   "++wmrl.shuffle_advantages=true", "wmrl.eval_every=0"), tmp_path / "null")
    assert len(used) == 3
    for (adv, valid), shuffled in zip(produced, used):
        np.testing.assert_allclose(np.sort(shuffled[valid]), np.sort(adv[valid]))
        assert (shuffled[~valid] == 0).all()
    assert any(not np.allclose(s, a) for (a, _), s in zip(produced, used)), "the advantages were never reordered"


def test_grpo_ratio_starts_from_the_rollouts_recorded_log_probs(debug_run, tmp_path, monkeypatch):
    """Imagined and real rollouts record each action's log-probability as it is sampled; the GRPO update uses them
    (no recomputing pass) and they equal what that pass would give, so the ratio starts at 1. With
    ``wmrl.rollout_log_prob=false`` the update recomputes them, and by default under ``algo.precision=bf16`` too (the
    update's bf16 log-probabilities are not the recorded float32 ones)."""
    import torch

    from vla_wmrl.algos.grpo import GRPO

    tmp, _ = debug_run
    seen = []
    real_update = GRPO.update

    def spy_update(self, steps, advantages, weights, index, num_rollouts, prepare=lambda b: b, **kwargs):
        if "old_log_prob" in steps:
            recomputed = self.log_prob({k: v for k, v in steps.items() if k != "old_log_prob"}, prepare)
            torch.testing.assert_close(steps["old_log_prob"], recomputed, atol=1e-4, rtol=1e-4)
        seen.append("old_log_prob" in steps)
        return real_update(self, steps, advantages, weights, index, num_rollouts, prepare, **kwargs)

    monkeypatch.setattr(GRPO, "update", spy_update)
    base = ["wmrl.updates=1", "wmrl.eval_every=0", "wmrl.wm_finetune_every=0", "wmrl.warmup_wm_steps=0"]
    train.run(_cfg(tmp, *base), tmp_path / "recorded")  # the warm-up's real groups, then imagined + anchor groups
    assert seen == [True, True]
    seen.clear()
    train.run(_cfg(tmp, *base, "wmrl.rollout_log_prob=false"), tmp_path / "recomputed")
    assert seen == [False, False]
    seen.clear()
    train.run(_cfg(tmp, *base, "algo.precision=bf16"), tmp_path / "bf16")
    assert seen == [False, False]


def test_torch_threads_sets_and_restores_the_thread_count():
    import torch

    before = torch.get_num_threads()
    with train.torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), train.torch_threads(before + 1):  # restored even when the block fails
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match=">= 1"), train.torch_threads(0):
        pass


def test_replay_anchors_pair_imagined_scores_with_the_simulated_outcome_of_their_actions(debug_run, tmp_path,
                                                                                       monkeypatch):
    """wmrl.anchor_mode=replay: an anchor group is imagined like the others, and its action sequences are replayed in
    the simulator from the same seeded resets. The group trains on its imagined steps, the calibrator pairs their
    world-model scores with the replays' outcomes, and the real episodes (world-model data, videos) played exactly
    those actions."""
    from vla_wmrl.correction import RewardCorrector

    tmp, _ = debug_run
    seen, real_process = [], RewardCorrector.process

    def spy(self, pred, real, anchors, **kw):
        seen.append((np.array(pred), np.array(real), np.array(anchors)))
        return real_process(self, pred, real, anchors, **kw)

    monkeypatch.setattr(RewardCorrector, "process", spy)
    collect_calls = _record_calls(monkeypatch, train.WMRLTrainer, "collect_groups")
    summary = train.run(_cfg(tmp, "wmrl.anchor_mode=replay", "wmrl.updates=1"), tmp_path / "replay")
    collected = [out for _, out in collect_calls]
    assert summary["updates"] == 1 and summary["real_env_steps"] > 0
    assert len(collected) == 2  # the warm-up (every group an anchor) and one update
    for (groups, checks, real, _), (pred, real_scores, anchors) in zip(collected, seen):
        anchor_rollouts = [r for g, a in zip(groups, anchors) if a for r in g]
        assert len(real) == len(anchor_rollouts) > 0
        for im, rr in zip(anchor_rollouts, real):
            assert not im.frames_imagined  # the trained-on anchor rollout is the imagined one ...
            np.testing.assert_array_equal(rr.action[:im.length], im.action)  # ... and the simulator played its actions
            assert rr.frames_imagined  # the real replay carries its imagination for the side-by-side videos
        assert np.isfinite(real_scores[anchors]).all()
        # the calibrator's predictions are the imagined rollouts' scores; the anchor group is its own check
        np.testing.assert_array_equal(pred[anchors].ravel(), [r.pred_score for r in anchor_rollouts])
        assert [c for c in checks if c] == [g for g, a in zip(groups, anchors) if a]
    with pytest.raises(ValueError, match="anchor_mode=replay needs.*imagine_from=reset"):
        train.run(_cfg(tmp, "wmrl.anchor_mode=replay", "wmrl.imagine_from=real"), tmp_path / "bad")
    with pytest.raises(ValueError, match="valid: \\['closed_loop', 'replay'\\]"):
        train.run(_cfg(tmp, "wmrl.anchor_mode=open_loop"), tmp_path / "bad2")


def test_matched_calibration_pairs_come_from_the_imagination_check(debug_run, tmp_path, monkeypatch):
    """correction.calibration_pairs=matched: the calibrator's pairs are the imagination check's scores (rollouts
    imagined from the anchor groups' start states) matched by rank to the anchor groups' real outcomes."""
    from vla_wmrl.correction import MonotoneCalibrator, RewardCorrector, rank_matched_pairs

    tmp, _ = debug_run
    calls, added = [], []
    real_process, real_add = RewardCorrector.process, MonotoneCalibrator.add

    def spy(self, pred, real, anchors, **kw):
        calls.append((np.array(real), np.array(anchors), kw.get("anchor_imagined")))
        return real_process(self, pred, real, anchors, **kw)

    def add_spy(self, pred, real, sd=None):
        added.append((np.array(pred), np.array(real)))
        return real_add(self, pred, real, sd)

    monkeypatch.setattr(RewardCorrector, "process", spy)
    monkeypatch.setattr(MonotoneCalibrator, "add", add_spy)
    summary = train.run(_cfg(tmp, "correction.calibration_pairs=matched", "wmrl.updates=1"), tmp_path / "matched")
    assert summary["updates"] == 1
    expected = [rank_matched_pairs(check[i], real[i]) for real, anchors, check in calls for i in np.flatnonzero(anchors)]
    assert len(added) == len(expected) > 1  # the warm-up's groups and the update's anchor group(s)
    for (p, r), (ep, er) in zip(added, expected):
        np.testing.assert_allclose(p, ep)
        np.testing.assert_array_equal(r, er)
    with pytest.raises(ValueError, match="calibration_pairs=matched .* needs wmrl.check_imagination=true"):
        train.run(_cfg(tmp, "correction.calibration_pairs=matched", "wmrl.check_imagination=false"), tmp_path / "bad")


def test_check_replay_gives_the_imagination_check_true_outcomes_for_the_ranking_check(debug_run, tmp_path,
                                                                                     monkeypatch):
    """wmrl.check_replay=true: the imagination check's rollouts (imagined from the anchor groups' start states) are
    replayed in the simulator, so each has the true outcome of its actions; the corrector receives them beside the
    check's scores (correction.rank_floor acts on their within-group correlation) and the replays count as real
    steps; they render nothing (black frames). The anchor groups themselves stay closed-loop real rollouts."""
    from vla_wmrl import executors
    from vla_wmrl.correction import RewardCorrector

    tmp, _ = debug_run
    calls, real_process = [], RewardCorrector.process

    def spy(self, pred, real, anchors, **kw):
        calls.append((np.array(anchors), kw.get("anchor_imagined"), kw.get("anchor_imagined_outcome")))
        return real_process(self, pred, real, anchors, **kw)

    monkeypatch.setattr(RewardCorrector, "process", spy)
    replays = _record_calls(monkeypatch, executors.SimExecutor, "replay")  # ((sequences, seeds), episodes)
    collect_calls = _record_calls(monkeypatch, train.WMRLTrainer, "collect_groups")
    summary = train.run(_cfg(tmp, "wmrl.check_replay=true", "correction.rank_floor=0.3", "wmrl.updates=1",
                             "wmrl.replay_slack=1"), tmp_path / "check_replay")
    collected = [out for _, out in collect_calls]
    assert summary["updates"] == 1
    assert len(replays) == len(collected) == 2  # the warm-up and the update each replay their check rollouts once
    for (groups, checks, real, metrics), (anchors, score, outcome), ((sequences, seeds), episodes) in zip(
            collected, calls, replays):
        checked = [r for c in checks if c for r in c]
        assert len(checked) == len(sequences) == anchors.sum() * len(groups[0])
        for r, seq, ep in zip(checked, sequences, episodes):
            np.testing.assert_array_equal(seq, r.action)  # the simulator played the imagined actions ...
            assert r.real_success in (0.0, 1.0)
            assert len(ep.frames) <= r.length + 1  # ... for as long as its outcome needs (debug replay_slack: 1)
            assert not any(v.any() for f in ep.frames for k, v in f.items() if k.startswith("observation.images."))
        np.testing.assert_array_equal(outcome[anchors].ravel(), [r.real_success for r in checked])
        np.testing.assert_array_equal(score[anchors].ravel(), [r.pred_score for r in checked])
        assert np.isnan(outcome[~anchors]).all()
        anchor_rollouts = [r for g, a in zip(groups, anchors) if a for r in g]
        assert anchor_rollouts == real and all(r.log_prob is not None for r in real)  # closed-loop, on-policy
        assert metrics["real_steps"] == sum(r.length for r in real) + sum(len(ep.frames) for ep in episodes)
    with pytest.raises(ValueError, match="ranking check .* needs wmrl.check_replay=true or wmrl.anchor_mode=replay"):
        train.run(_cfg(tmp, "correction.rank_floor=0.3"), tmp_path / "bad")
    with pytest.raises(ValueError, match="ranking check .* needs wmrl.check_imagination=true"):
        train.run(_cfg(tmp, "wmrl.check_replay=true", "wmrl.check_imagination=false"), tmp_path / "bad2")
