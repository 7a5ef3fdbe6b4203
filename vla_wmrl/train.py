"""The whole WMRL pipeline in one command::

    python -m vla_wmrl.train sim=robosuite_lift                  # default run
    python -m vla_wmrl.train sim=robosuite_lift +experiment=debug  # every stage shrunk: a minute or two
    python -m vla_wmrl.train sim=robosuite_lift wmrl.mode=sim      # baseline: every rollout in the real simulator
    python -m vla_wmrl.train sim=none dataset=data/so101_pick robot=so101_follower robot.port=/dev/ttyACM0

Without a simulator (``sim=none``) a LeRobotDataset defines the task: behaviour cloning and the world model train on
it, imagined groups start from its episodes' first frames, and anchor and evaluation episodes run on the robot
(``robot=...``, through LeRobot's drivers; see ``vla_wmrl.executors``). Without a robot too, only ``wmrl.mode=wm``
can run.

Stages (each cached by its configuration under ``cache_dir``, so a second run reuses what is done): collect expert
demonstrations -> collect noisy-expert episodes -> behaviour-clone the VLA -> train the world model -> WMRL loop
(imagine groups, execute anchor groups for real, correct rewards, GRPO update, fine-tune the world model, evaluate)
-> final evaluation in the real simulator -> videos and ``summary.json``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from vla_wmrl.algos.grpo import GRPO, GRPOConfig
from vla_wmrl.config import ExpertConfig, SimConfig, to_dataclass, write_summary
from vla_wmrl.correction import CorrectionConfig, RewardCorrector
from vla_wmrl.imagination import (SCORES, Rollout, from_episode, imagine, observations_at, repeat_obs,
                                  score_in_world_model, step_batch, to_policy_batch)
from vla_wmrl.stages import run_stage

log = logging.getLogger(__name__)
MODES = ("wmrl", "sim", "wm")
ANCHOR_MODES = ("closed_loop", "replay")
IMAGINE_FROM = ("reset", "real")
RECENT_REAL = 256  # real rollouts kept for world-model fine-tuning
POLICY_DATA_SEED = 900_000  # start-state seeds of the behaviour-cloned policy's recorded rollouts (pipeline stage)


@dataclass
class PipelineConfig:
    """Stages before RL."""

    demo_episodes: int = 50          # expert demonstrations recorded
    sft_episodes: int | None = 10    # demonstrations behaviour cloning uses (null = all)
    wm_episodes: int = 100           # noisy-expert episodes recorded for the world model (plus the demonstrations)
    wm_noise: float = 1.0            # action-noise std of those episodes
    sft_steps: int = 2000            # behaviour-cloning optimisation steps
    sft_minutes: float | None = 8.0  # behaviour-cloning wall-clock cap
    policy_episodes: int = 100       # rollouts of the behaviour-cloned policy (sampled at wmrl.explore_std) added to
                                     # the world model's data, so it has seen what the policy it imagines does
    wm_minutes: float = 30.0         # world-model training wall-clock cap
    wm_steps: int | None = 10_000    # world-model optimisation steps (None: as many as wm_minutes allows); with a step
                                     # budget every machine trains as many steps, and wm_minutes stays as a cap
    wm_batch_size: int = 32
    wm_precision: str = "fp32"       # fp32 | bf16: autocast of the world model's training forward pass
                                     # (benchmarks/wm_train_speed.py)

    def __post_init__(self):  # checked when the config is read, before any stage runs
        from vla_wmrl.train_world_model import PRECISIONS

        if self.wm_precision not in PRECISIONS:
            raise ValueError(f"unknown pipeline.wm_precision {self.wm_precision!r}; valid: {list(PRECISIONS)}")


@dataclass
class WMRLConfig:
    """The RL loop."""

    mode: str = "wmrl"               # wmrl (imagined + anchor groups) | sim (all groups real) | wm (imagined only)
    updates: int = 40                # policy updates (configs/train.yaml sets the same)
    groups: int = 8                  # start states per update
    group_size: int = 8              # rollouts per start state (GRPO group)
    horizon: int = 60                # steps per real rollout (and per imagined one, unless imagine_horizon is set)
    imagine_from: str = "reset"      # reset: imagined groups start at seeded resets' first frames | real: at a random
                                     # step of a recent real rollout (short branches the world model predicts well)
    imagine_horizon: int | None = None  # steps per imagined rollout (None = horizon)
    branch_pool: int = 64            # recent real rollouts that imagine_from=real branches from
    score: str = "final"             # a rollout's world-model score: success probability at its last step (final)
                                     # or the highest along it (max; biased up for long, failed rollouts)
    num_envs: int = 2                # simulator worker processes (real rollouts and evaluation)
    eval_every: int = 10             # updates between real-simulator evaluations (0 = only at the end)
    eval_episodes: int = 50          # seeded evaluation episodes (seeds disjoint from training)
    eval_horizon: int | None = None  # steps per evaluation episode (None = the task's, sim.horizon, as in
                                     # `python -m vla_wmrl.eval`; training rollouts stay at ``horizon``)
    wm_finetune_every: int = 0       # updates between world-model fine-tunes on the new real episodes (0 = never)
    wm_finetune_steps: int = 30      # gradient steps per fine-tune (half the windows from new real episodes)
    wm_finetune_lr: float = 1e-4    # 3e-4 wiped out the success predictions on Lift (docs/world_models.md)
    wm_finetune_success_frac: float = 0.5  # of the new episodes' windows, the fraction drawn holding a success label
    warmup_groups: int = 2           # real groups of the starting policy run before the first update: the calibrator
                                     # and the imagination gap get their first observations (with warmup_wm_steps the
                                     # world model also trains on them; counted as RL time/steps)
    warmup_wm_steps: int = 0         # world-model gradient steps on the warm-up episodes
    warmup_train: bool = True        # the warm-up groups (real, on-policy, graded by the simulator) also make one
                                     # GRPO update, so the real steps they cost train the policy too
    max_minutes: float | None = None  # RL wall-clock budget (warm-up included, evaluation excluded): no update starts
                                      # that would end past it at the slowest recent update's pace (None = off)
    anchor_mode: str = "closed_loop"  # closed_loop: anchor groups are the policy acting in the simulator, paired with
                                      # the world model's open-loop replay of them | replay: anchor groups are
                                      # imagined like the others and their action sequences replayed in the
                                      # simulator, so the calibrator's (score, outcome) pairs come from imagined
                                      # rollouts, the distribution its map is applied to (docs/rl_benchmark.md)
    replay_slack: int = 5            # replay: steps past an imagined rollout's end its replay may take to succeed
                                     # (the world model may end a rollout a few steps before the simulator would)
    check_imagination: bool = True   # also imagine the anchor groups' start states (closed loop, not trained on):
                                     # the corrector's imagination gap (correction.gap_tolerance) compares them with
                                     # the real outcomes and turns the imagined stream down when it over-promises
    check_replay: bool = False       # also replay the imagination check's action sequences in the simulator (one more
                                     # real group per anchor group): each checked rollout gets its true outcome, so the
                                     # corrector can check the *ranking* of imagined scores (correction.rank_floor), not
                                     # only their mean (anchor_mode=replay's anchor groups are paired already)
    videos: int = 2                  # real | imagined side-by-side videos written at each evaluation
    shuffle_advantages: bool = False  # null control: permute the advantages (and weights) across the update's valid
                                     # rollouts before GRPO, so the update has the same size but no learning signal
    threads: int = 1                 # torch CPU threads while rolling out (beside the simulator workers)
    update_threads: int | None = None  # torch CPU threads of the GRPO update and world-model fine-tunes, while the
                                       # simulator workers wait (None = every CPU core; 2 on 2 cores: 0.62x the
                                       # 1-thread time, benchmarks/grpo_update.py)
    rollout_log_prob: bool | None = None  # the GRPO ratio's denominator is the log-probability recorded as each action
                                     # was sampled (false: recomputed before the update, one more forward pass over
                                     # every step; for a policy whose rollout inference differs from training's).
                                     # None: recorded with algo.precision=fp32, recomputed with bf16 (the update's bf16
                                     # log-probabilities differ from the recorded float32 ones, ~0.04 nats on Lift's BC
                                     # policy; recomputed, an update follows float32's more closely: parameter-change
                                     # cosine 0.94-0.96 against 0.89-0.94, benchmarks/bf16_update_fidelity.py)
                                     # Robot episodes keep the action sent after the safety filter and record no
                                     # log-probabilities, so an update that includes any recomputes them all
    explore_std: float | None = 0.1  # the policy's (pre-tanh) exploration std is set to this before RL; None keeps
                                     # the behaviour-cloned one (Lift, 10-demo BC: std 0.3 -> 2-6% success when
                                     # sampling vs 58% deterministic; 0.1 -> 25%, 0.05 -> 48%)

    def __post_init__(self):
        # Checked when the config is read, before any stage runs (a bad value must not wait for the world model).
        for key, valid in (("mode", MODES), ("score", SCORES), ("imagine_from", IMAGINE_FROM),
                           ("anchor_mode", ANCHOR_MODES)):
            if getattr(self, key) not in valid:
                raise ValueError(f"unknown wmrl.{key} {getattr(self, key)!r}; valid: {list(valid)}")
        if not 0.0 <= self.wm_finetune_success_frac <= 1.0:
            raise ValueError(f"wmrl.wm_finetune_success_frac must be in [0, 1], got {self.wm_finetune_success_frac}")

    def update_thread_count(self) -> int:
        """Torch threads for work that has the machine to itself (GRPO updates, fine-tunes, the pipeline stages)."""
        return self.update_threads or os.cpu_count() or 1


# ------------------------------------------------------------------------------------------------- stages
def stage_data(cache: Path, sim: SimConfig, episodes: int, noise: float, seed: int) -> Path:
    """Expert (noise 0) or noisy-expert episodes as a LeRobotDataset."""
    from vla_wmrl.collect import collect

    spec = {"sim": asdict(sim), "episodes": episodes, "noise": noise, "seed": seed}
    name = "demos" if noise == 0 else "noisy"
    out, _ = run_stage(cache, name, spec, lambda d: collect(
        sim, ExpertConfig(noise=noise), episodes, str(d / "dataset"), f"local/{sim.name}_{name}", seed=seed,
        overwrite=True))
    return out / "dataset"


def stage_policy_data(cache: Path, sim: SimConfig, policy_path: Path, episodes: int, explore_std: float | None,
                      seed: int) -> Path:
    """The behaviour-cloned policy's own sampled rollouts as a LeRobotDataset (on-policy data for the world model)."""
    from vla_wmrl.collect import collect

    spec = {"sim": asdict(sim), "policy": str(policy_path), "episodes": episodes, "explore_std": explore_std,
            "seed": seed}
    out, _ = run_stage(cache, "policy_rollouts", spec, lambda d: collect(
        sim, ExpertConfig(), episodes, str(d / "dataset"), f"local/{sim.name}_policy", seed=seed, overwrite=True,
        policy_path=str(policy_path), explore_std=explore_std))
    return out / "dataset"


def stage_sft(cache: Path, sim: SimConfig | None, policy_cfg: dict, pipe: PipelineConfig, demos: Path,
              seed: int) -> Path:
    """Behaviour-cloned VLA (the SFT base and the KL reference)."""
    from vla_wmrl import sft

    episodes = pipe.sft_episodes if sim is not None else None  # a user's dataset is used whole

    def run(out: Path) -> dict:
        frames, meta = sft.load_frames(demos, episodes)
        kwargs = {k: v for k, v in policy_cfg.items() if k != "name"}
        policy = sft.build_policy(policy_cfg["name"], kwargs, meta, demos, sim)
        cfg = sft.SFTConfig(dataset=str(demos), episodes=episodes, steps=pipe.sft_steps,
                            max_minutes=pipe.sft_minutes, seed=seed, threads=torch.get_num_threads())
        return sft.train(policy, frames, cfg, out)

    spec = {"sim": asdict(sim) if sim else None, "policy": policy_cfg, "demos": str(demos), "episodes": episodes,
            "steps": pipe.sft_steps, "minutes": pipe.sft_minutes, "seed": seed}
    out, _ = run_stage(cache, "sft", spec, run)
    return out / "pretrained_model"


def stage_world_model(cache: Path, sim: SimConfig | None, wm_cfg: dict, pipe: PipelineConfig, datasets: list[Path],
                      seed: int) -> Path:
    """World model trained on demonstrations + noisy-expert episodes."""
    from vla_wmrl import train_world_model as twm

    def run(out: Path) -> dict:
        steps = {} if pipe.wm_steps is None else {"steps": pipe.wm_steps}
        cfg = twm.TrainWorldModelConfig(dataset=[str(d) for d in datasets], max_minutes=pipe.wm_minutes,
                                        batch_size=pipe.wm_batch_size, seed=seed, resume=True,
                                        num_threads=torch.get_num_threads(), precision=pipe.wm_precision, **steps)
        summary = twm.train(cfg, dict(wm_cfg), sim, out)
        if pipe.wm_steps is not None and summary["status"] == "time_budget":
            log.warning("world model: pipeline.wm_minutes=%g ended training after %d of pipeline.wm_steps=%d steps; "
                        "raise pipeline.wm_minutes for the full step budget", pipe.wm_minutes, summary["steps"],
                        pipe.wm_steps)
        return summary

    if pipe.wm_steps is not None and pipe.wm_steps <= 0:
        raise ValueError(f"pipeline.wm_steps must be a positive number of steps or null, got {pipe.wm_steps}")
    spec = {"sim": asdict(sim) if sim else None, "world_model": wm_cfg, "datasets": [str(d) for d in datasets],
            "minutes": pipe.wm_minutes, "batch_size": pipe.wm_batch_size, "seed": seed}
    if pipe.wm_steps is not None:  # only when set: runs cached without a step budget keep their key
        spec["steps"] = pipe.wm_steps
    if pipe.wm_precision != "fp32":  # likewise: fp32 runs keep their key
        spec["precision"] = pipe.wm_precision
    out, _ = run_stage(cache, "world_model", spec, run)
    return out / "checkpoints" / "last"


# ------------------------------------------------------------------------------------------------- the WMRL loop
def _unlike_imagination(cfg: "WMRLConfig") -> list[str]:
    """What keeps imagined rollouts from being like for like with the real ones (imagined from the same seeded reset,
    for as many steps): the settings replay anchors, the imagination check and matched pairs need; [] when none."""
    return [p for p, bad in (
        (f"wmrl.imagine_from=reset (got {cfg.imagine_from})", cfg.imagine_from != "reset"),
        (f"imagined rollouts as long as real ones (wmrl.imagine_horizon={cfg.imagine_horizon}, horizon={cfg.horizon})",
         (cfg.imagine_horizon or cfg.horizon) != cfg.horizon)) if bad]


class WMRLTrainer:
    """Holds what the loop needs: the real executor (simulator workers or a robot), policy (+ frozen reference),
    world model, corrector, GRPO.

    ``mode="sim"`` executes every group for real (standard RL, no world model); ``mode="wm"`` imagines every group
    (no anchors, no correction); ``mode="wmrl"`` imagines most groups and executes anchor groups for real.
    """

    TRAIN_SEED = 200_000   # start-state seeds of training groups (demonstrations use 0.., noisy episodes 1000..)
    WARMUP_SEED = 400_000  # start-state seeds of warm-up groups
    EVAL_SEED = 100_000    # evaluation seeds (as in `python -m vla_wmrl.eval`)

    def __init__(self, cfg: WMRLConfig, executor, policy, world_model, corr_cfg: CorrectionConfig,
                 algo_cfg: GRPOConfig, run_dir: Path, seed: int, wm_data=None):
        from vla_wmrl.policies import RolloutAdapter, check_env_compat, set_exploration_std

        if cfg.mode != "wm" and not executor.can_run:
            raise ValueError(f"wmrl.mode={cfg.mode} executes episodes for real, but {executor.name} has no robot: "
                             f"pass robot=<type>, or use wmrl.mode=wm (imagination only)")
        self.cfg, self.executor, self.run_dir, self.seed = cfg, executor, run_dir, seed
        self.policy = policy
        if cfg.explore_std is not None:
            set_exploration_std(policy, cfg.explore_std)
        self.algo = GRPO(policy, copy.deepcopy(policy), algo_cfg)
        self.corrector = RewardCorrector(corr_cfg)
        self.world_model, self.wm_data = world_model, wm_data
        check_env_compat(policy.config, executor.observation_space, executor.action_space,
                         source=f"policy ({policy.config.type})")
        self.image_keys = list(executor.image_keys)
        self.imagined = None
        if world_model is not None:
            from world_models import ImaginedVectorEnv

            _check_world_model_fits(world_model, executor)
            self.imagined = ImaginedVectorEnv(world_model, horizon=cfg.horizon, seed=seed)
            self.wm_opt = torch.optim.AdamW(world_model.parameters(), lr=cfg.wm_finetune_lr)
        self.replay_anchors = cfg.anchor_mode == "replay" and cfg.mode == "wmrl"
        if self.replay_anchors:
            problems = [p for p, bad in (
                (f"a simulator (replaying actions reproduces a trajectory only from an identical, seeded start state; "
                 f"got {executor.name})", executor.kind != "sim"),
                ("a world model", world_model is None)) if bad] + _unlike_imagination(cfg)
            if problems:
                raise ValueError("wmrl.anchor_mode=replay needs " + "; ".join(problems) +
                                 "; use wmrl.anchor_mode=closed_loop")
        if cfg.mode == "wmrl" and corr_cfg.calibration_pairs == "matched":  # (denoise alone needs the fitted map too)
            problems = [p for p, bad in (
                ("wmrl.check_imagination=true", not cfg.check_imagination),
                ("wmrl.anchor_mode=closed_loop (replay pairs scores and outcomes of the same rollouts already)",
                 self.replay_anchors)) if bad] + _unlike_imagination(cfg)
            if problems:
                raise ValueError("correction.calibration_pairs=matched pairs the imagination check's scores with the "
                                 "anchor groups' real outcomes, so it needs " + "; ".join(problems) +
                                 "; or use correction.calibration_pairs=rollout")
        if cfg.mode == "wmrl" and (corr_cfg.rank_floor is not None or cfg.check_replay):
            problems = [p for p, bad in (
                ("wmrl.check_imagination=true", not cfg.check_imagination),
                ("wmrl.check_replay=true or wmrl.anchor_mode=replay (the checked rollouts' true outcomes)",
                 corr_cfg.rank_floor is not None and not (cfg.check_replay or self.replay_anchors)),
                (f"a simulator (replays reproduce a trajectory only from a seeded start state; got {executor.name})",
                 executor.kind != "sim")) if bad] + _unlike_imagination(cfg)
            if problems:
                raise ValueError("the imagination ranking check (correction.rank_floor, wmrl.check_replay) needs "
                                 + "; ".join(problems) + "; or set correction.rank_floor=null wmrl.check_replay=false")
        self.record_log_prob = (algo_cfg.precision == "fp32" if cfg.rollout_log_prob is None  # (see WMRLConfig)
                                else cfg.rollout_log_prob)
        self.adapter = RolloutAdapter(policy, record_log_prob=self.record_log_prob)
        self.update_threads = cfg.update_thread_count()  # GRPO and world-model fine-tunes
        self.rng = np.random.default_rng(seed)
        self.branch_rng = np.random.default_rng(seed + 1)
        self.null_rng = np.random.default_rng(seed + 2)  # shuffle_advantages (a null control) only
        self.update_idx, self.real_steps, self.train_seconds = 0, 0, 0.0
        self.update_seconds: list[float] = []  # duration of each update of this process (the max_minutes pace)
        self.warmup_seconds = 0.0  # the warm-up's duration: the pace estimate before the first update
        self.warmed_up = False  # the warm-up ran (a resumed run does not repeat it)
        # The most recent real rollouts: world-model fine-tuning data, and imagine_from=real's branch points.
        self.recent_real: list[Rollout] = []
        self.history: list[dict] = []
        self.last_anchor_rollouts: list[Rollout] = []

    # ------------------------------------------------------------------------------------------------------------
    def collect_groups(self, seeds: list[int], anchors: np.ndarray
                       ) -> tuple[list[list[Rollout]], list[list[Rollout]] | None, list[Rollout], dict]:
        """Imagine the non-anchor groups while the anchor groups run in the simulator workers, concurrently.

        Returns (groups, checks, real, metrics); ``real`` holds the rollouts executed for real. With
        ``check_imagination`` (a world model, ``imagine_from=reset`` and the full horizon), the anchor groups' start
        states are imagined closed-loop as well: ``checks[i]`` holds those rollouts for anchor group ``i`` (None for
        the others); the corrector compares them with the real outcomes, and nothing trains on them.

        With ``anchor_mode=replay`` an anchor group is imagined first, like the others, and its action sequences are
        then replayed in the simulator (while the other groups are imagined): the group trains on its imagined
        steps with the replays' real outcomes, its world-model scores are the calibrator's predictions, and it is
        its own imagination check. With ``check_replay`` (closed-loop anchors) the check's rollouts are imagined while
        the anchor groups run, and their action sequences replayed in the simulator after them (each for its imagined
        length + ``replay_slack`` steps, without rendering: only outcomes are read), so each gets its true outcome
        (``real_success``; the replays count as real steps)."""
        cfg, t0 = self.cfg, time.perf_counter()
        G = cfg.group_size
        # Real and imagined rollouts sample concurrently (two threads), so neither draws from torch's global
        # generator: the imagined batch draws from its own, and each real episode from one seeded by its index in
        # this call, so its noise depends on neither which worker ran it nor when the others ended. Both are keyed
        # by this call's first start state (unique per run seed, update and warm-up). Runs still differ at float
        # level (docs/rl_benchmark.md).
        self.adapter.generator = torch.Generator().manual_seed(2 * seeds[0])
        if self.imagined is not None:  # the world model's own sampling noise (diffusion), likewise
            self.imagined.generator.manual_seed(2 * seeds[0])
        real_seeds = [s for s, a in zip(seeds, anchors) if a]
        train_seeds = [s for s, a in zip(seeds, anchors) if not a]
        replay = self.replay_anchors and bool(real_seeds)
        # Only like for like: imagined from the same seeded reset and for as many steps as the real rollouts.
        check = (self.imagined is not None and cfg.check_imagination and bool(real_seeds)
                 and not _unlike_imagination(cfg))
        check_replay = check and not replay and cfg.check_replay and cfg.mode == "wmrl"
        imag_seeds = train_seeds + (real_seeds if check and not (replay or check_replay) else [])
        real_group_seeds = [s for s in real_seeds for _ in range(G)]
        def imagine_anchor_starts() -> list[Rollout]:  # G closed-loop rollouts from each anchor group's start state
            return imagine(self.imagined, self.adapter, repeat_obs(self.imagined_starts(real_seeds), G), cfg.horizon,
                           score=cfg.score)

        replayed, checked = [], Future()  # checked: the check_replay rollouts, imagined while the anchors run
        if replay:  # imagined first: the simulator replays their actions while the rest is imagined
            replayed = imagine_anchor_starts()

        def run_real():
            from vla_wmrl.policies import RolloutAdapter

            if replay:
                episodes = self.executor.replay([r.action for r in replayed], real_group_seeds)
            else:
                episodes = self.executor.run(RolloutAdapter(self.policy, episode_seed=2 * seeds[0] + 1,
                                                            record_log_prob=self.record_log_prob), real_group_seeds)
            check_episodes = []
            if check_replay:  # each replay only as long as the outcome it checks needs (its length + slack)
                rollouts = checked.result()
                check_episodes = self.executor.replay([r.action for r in rollouts], real_group_seeds, cameras=False,
                                                      max_steps=[r.length + cfg.replay_slack for r in rollouts])
            return episodes, check_episodes, time.perf_counter() - t0

        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(run_real) if real_seeds else None
            if check_replay:
                try:
                    checked.set_result(imagine_anchor_starts())
                except BaseException as e:  # the simulator thread waits on it: fail it too, never hang
                    checked.set_exception(e)
                    raise
            imagined = []
            if imag_seeds:
                start = repeat_obs(self.imagined_starts(imag_seeds), G)
                imagined = imagine(self.imagined, self.adapter, start, self.cfg.imagine_horizon or self.cfg.horizon,
                                   score=self.cfg.score)
            imag_s = time.perf_counter() - t0
            episodes, check_episodes, real_s = future.result() if future else ([], [], 0.0)
        if check_replay:  # the checked rollouts' true outcomes: the ranking check's pairs (nothing trains on them)
            checked = checked.result()
            _set_replay_outcomes(checked, check_episodes, cfg.replay_slack)
        else:
            imagined, checked = imagined[:len(train_seeds) * G], imagined[len(train_seeds) * G:]
        if replay:  # episodes come back in the order of the sequences
            real = [from_episode(ep, self.image_keys) for ep in episodes]
            _set_replay_outcomes(replayed, episodes, cfg.replay_slack)
            first = self.image_keys[0]
            for r, im in zip(real, replayed):
                r.frames_imagined = list(im.images[first][1:])  # videos: the replay beside its imagination
            by_seed = {s: replayed[j * G:(j + 1) * G] for j, s in enumerate(real_seeds)}
            checked = replayed if check else []
        else:
            by_seed = {s: [] for s in real_seeds}
            for ep in episodes:  # in the requested order (SimExecutor.run), which the minibatch order indexes
                by_seed[ep.seed].append(from_episode(ep, self.image_keys))
            real = [r for s in real_seeds for r in by_seed[s]]
            if self.imagined is not None:
                score_in_world_model(self.imagined, real, self.cfg.score)  # (predicted, real) pairs for the calibrator
        groups, checks, it_i, it_r = [], [], iter(range(0, len(imagined), G)), iter(range(len(real_seeds)))
        for a in anchors:
            if a:
                j = next(it_r)
                groups.append(by_seed[real_seeds[j]])
                checks.append(checked[j * G:(j + 1) * G] if check else None)
            else:
                i = next(it_i)
                groups.append(imagined[i:i + G])
                checks.append(None)
        n_imag_steps = sum(r.length for r in imagined + (replayed if replay else checked))
        n_real_steps = sum(r.length for r in real) + sum(len(ep.frames) for ep in check_episodes)
        return groups, (checks if check else None), real, {
            "imagined_steps": n_imag_steps, "real_steps": n_real_steps,
            "imagined_steps_per_s": n_imag_steps / max(imag_s, 1e-9) if n_imag_steps else 0.0,
            "real_steps_per_s": n_real_steps / max(real_s, 1e-9) if real else 0.0,
            "collect_seconds": time.perf_counter() - t0}

    def imagined_starts(self, seeds: list[int]) -> dict:
        """Start observations of imagined groups: seeded resets, or (``imagine_from=real``, once real rollouts
        exist) the observation at a random step of a random recent real rollout."""
        pool = self.recent_real[-self.cfg.branch_pool:]
        if self.cfg.imagine_from != "real" or not pool:
            return self.executor.start_observations(seeds)
        picks = [pool[i] for i in self.branch_rng.integers(len(pool), size=len(seeds))]
        return observations_at(picks, [int(self.branch_rng.integers(r.length)) for r in picks])

    def update(self) -> dict:
        """One WMRL step: groups -> corrected advantages -> GRPO update (-> world-model fine-tune)."""
        cfg, t0 = self.cfg, time.perf_counter()
        seeds = [self.TRAIN_SEED + self.seed * 1_000_000 + self.update_idx * cfg.groups + g for g in range(cfg.groups)]
        if cfg.mode == "sim":
            anchors = np.ones(cfg.groups, bool)
        elif cfg.mode == "wm":
            anchors = np.zeros(cfg.groups, bool)
        else:
            anchors = self.corrector.select_anchors(cfg.groups, self.rng)
            if self.corrector.imagination_trust == 0.0:  # imagined groups would be dropped: run the anchors alone
                seeds, anchors = [s for s, a in zip(seeds, anchors) if a], anchors[anchors]
        groups, checks, real_rollouts, metrics = self.collect_groups(seeds, anchors)
        pred, var, real = _group_scores(groups)
        graded = np.isfinite(pred) | anchors[:, None]
        pred = np.where(np.isfinite(pred), pred, 0.0)  # sim mode has no world model: only real scores count
        check = _check_scores(checks, pred.shape)
        out = self.corrector.process(pred, real, anchors, pred_var=np.where(np.isfinite(var), var, 0.0),
                                     graded=graded, lengths=np.array([[r.length for r in g] for g in groups]),
                                     anchor_imagined=check,
                                     anchor_imagined_outcome=_check_scores(checks, pred.shape, "real_success"))
        algo_metrics = self._policy_update(groups, out)
        self._remember_real(real_rollouts)
        self.last_anchor_rollouts = real_rollouts or self.last_anchor_rollouts
        self.real_steps += metrics["real_steps"]
        self.update_idx += 1
        if self.imagined is not None and cfg.wm_finetune_every and self.update_idx % cfg.wm_finetune_every == 0:
            with torch_threads(self.update_threads):
                metrics.update(self.finetune_world_model())
        seconds = time.perf_counter() - t0
        self.train_seconds += seconds
        self.update_seconds.append(seconds)
        imagined_pred = pred[~anchors] if (~anchors).any() else np.array([np.nan])
        # The anchor stream's part of the update, sum |weight x advantage| over valid rollouts: about its share of the
        # rollouts (1 group of 8) at trust and anchor weight 1, 1.0 when the imagination check drops the imagined groups.
        push = np.abs(out.weights * out.advantages) * out.valid
        anchor_push, total_push = float(push[anchors].sum()), float(push.sum())
        metrics.update({f"algo/{k}": v for k, v in algo_metrics.items()})
        metrics.update({f"correction/{k}": v for k, v in self.corrector.stats().items()})
        metrics.update({"update": self.update_idx, "real_steps_total": self.real_steps,
                        "train_seconds": self.train_seconds, "anchor_groups": int(anchors.sum()),
                        "anchor_success": float(np.nanmean(real)) if anchors.any() else float("nan"),
                        "anchor_pred_score": float(pred[anchors].mean()) if anchors.any() and self.imagined else
                        float("nan"), "imagined_pred_score": float(np.mean(imagined_pred)),
                        "anchor_imagined_score": float(np.nanmean(check)) if check is not None else float("nan"),
                        "anchor_update_share": anchor_push / total_push if total_push > 0 else float("nan"),
                        "update_seconds": seconds})
        return metrics

    def _policy_update(self, groups: list[list[Rollout]], out, warmup: bool = False) -> dict:
        """GRPO on the groups' rollouts with the corrector's advantages and weights (``out``).

        The minibatch order is drawn from a generator seeded by (seed, update, warm-up or not), not from torch's global
        one: that one's state depends on which pipeline stages ran in this process (a cached stage draws nothing) and
        is not in the checkpoint, so a rerun on a warm cache or a resumed run would shuffle differently."""
        steps, index = step_batch([r for g in groups for r in g])
        advantages, weights = out.advantages.reshape(-1), out.weights.reshape(-1)
        if self.cfg.shuffle_advantages:  # null control (see WMRLConfig): same magnitudes, assigned at random
            valid = np.flatnonzero(out.valid.reshape(-1))
            perm = self.null_rng.permutation(valid)
            advantages, weights = advantages.copy(), weights.copy()
            advantages[valid], weights[valid] = advantages[perm], weights[perm]
        key = np.random.SeedSequence([self.seed % 2**32, self.update_idx, int(warmup)]).generate_state(1)[0]
        with torch_threads(self.update_threads):
            return self.algo.update(steps, advantages, weights, index, num_rollouts=max(int(out.valid.sum()), 1),
                                    prepare=to_policy_batch, generator=torch.Generator().manual_seed(int(key)))

    def budget_left(self, seconds_left: float | None = None) -> float | None:
        """Seconds left of the tighter budget: ``max_minutes`` of RL, or ``seconds_left`` of the whole run's (None:
        no budget applies)."""
        rl_left = None if self.cfg.max_minutes is None else 60 * self.cfg.max_minutes - self.train_seconds
        return min((s for s in (rl_left, seconds_left) if s is not None), default=None)

    def out_of_time(self, seconds_left: float | None = None) -> bool:
        """Whether another update, at the pace of the slowest of the last three (before the first: the warm-up's),
        would end past ``max_minutes`` of RL or, given ``seconds_left`` (the whole run's budget), past that."""
        left = self.budget_left(seconds_left)
        return left is not None and max(self.update_seconds[-3:], default=self.warmup_seconds) > left

    def warmup(self) -> dict:
        """Before the first update: ``warmup_groups`` real groups of the starting policy. Their (predicted, real)
        pairs go to the calibrator, so it is fitted from the first update, and their closed-loop imagined twins to the
        imagination gap; with ``warmup_train`` they also make a GRPO update on their real outcomes (on-policy
        simulator RL), and with ``warmup_wm_steps`` the world model is fine-tuned on them. Counted in real steps and
        RL time. Skipped in ``mode=wm`` (imagination only, by definition)."""
        cfg, t0 = self.cfg, time.perf_counter()
        if not cfg.warmup_groups or self.imagined is None or cfg.mode == "wm" or not self.executor.can_run:
            return {}
        seeds = [self.WARMUP_SEED + self.seed * 1_000_000 + g for g in range(cfg.warmup_groups)]
        anchors = np.ones(cfg.warmup_groups, bool)
        groups, checks, real_rollouts, collected = self.collect_groups(seeds, anchors)  # every group an anchor
        pred, var, real = _group_scores(groups)
        out = self.corrector.process(pred, real, anchors, pred_var=var,
                                     anchor_imagined=_check_scores(checks, pred.shape),
                                     anchor_imagined_outcome=_check_scores(checks, pred.shape, "real_success"))
        metrics = {}
        if cfg.warmup_train:
            metrics.update({f"warmup_algo/{k}": v for k, v in self._policy_update(groups, out, warmup=True).items()})
        self._remember_real(real_rollouts)
        self.last_anchor_rollouts = real_rollouts
        self.real_steps += collected["real_steps"]
        if cfg.warmup_wm_steps:
            metrics.update(self.finetune_world_model(cfg.warmup_wm_steps))
        self.warmup_seconds = time.perf_counter() - t0
        self.train_seconds += self.warmup_seconds
        self.warmed_up = True
        metrics.update({"warmup_success": float(real.mean()), "warmup_real_steps": collected["real_steps"],
                        "warmup_seconds": self.warmup_seconds})
        log.info("warm-up: %d real rollouts (success %.2f), %s, world model fine-tuned %d steps in %.0f s",
                 real.size, metrics["warmup_success"], "one GRPO update" if cfg.warmup_train else "no policy update",
                 cfg.warmup_wm_steps, metrics["warmup_seconds"])
        return metrics

    def _remember_real(self, rollouts: list[Rollout]) -> None:
        """Append real rollouts to the bounded list that fine-tuning and ``imagine_from=real`` draw from."""
        self.recent_real = (self.recent_real + rollouts)[-max(RECENT_REAL, self.cfg.branch_pool):]

    def finetune_world_model(self, steps: int | None = None) -> dict:
        """``steps`` (default ``wm_finetune_steps``) gradient steps on windows from the recent real episodes,
        mixed half-half with the original data so the world model follows the changing policy without forgetting."""
        from vla_wmrl.train_world_model import finetune

        if not self.recent_real or self.wm_data is None:
            return {}
        new = rollouts_to_episode_data(self.recent_real[-RECENT_REAL:], self.image_keys)
        cfg = self.cfg
        losses = finetune(self.world_model, self.wm_opt, new, self.wm_data,
                          cfg.wm_finetune_steps if steps is None else steps,
                          torch.Generator().manual_seed(self.seed + self.update_idx),
                          success_frac=cfg.wm_finetune_success_frac)
        return {"wm/finetune_loss": float(np.mean(losses)) if losses else float("nan")}

    def evaluate(self, episodes: int, video_dir: Path | None = None) -> dict:
        result = self.executor.evaluate(self.policy, episodes, seed=self.EVAL_SEED)
        if video_dir is not None and self.cfg.videos:
            result["side_by_side"] = write_side_by_side(self.last_anchor_rollouts[: self.cfg.videos], video_dir,
                                                        self.executor.fps)
        return result

    # ------------------------------------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Checkpoint everything needed to resume (policy, reference, optimiser, corrector, world model, counters),
        written to a temporary directory and swapped in atomically."""
        tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.policy.save_pretrained(tmp / "policy")
        torch.save({"optimizer": self.algo.optimizer.state_dict(), "ref": self.algo.ref_policy.state_dict(),
                    "rng": self.rng.bit_generator.state,
                    "null_rng": self.null_rng.bit_generator.state, "update_idx": self.update_idx,
                    "real_steps": self.real_steps, "train_seconds": self.train_seconds,
                    "warmed_up": self.warmed_up, "warmup_seconds": self.warmup_seconds,
                    "update_seconds": self.update_seconds[-3:],
                    "wm_opt": self.wm_opt.state_dict() if self.imagined is not None else None,
                    "freeze_encoder": self.algo.cfg.freeze_encoder, "history": self.history}, tmp / "trainer.pt")
        (tmp / "corrector.json").write_text(json.dumps(self.corrector.state_dict()))
        if self.world_model is not None:
            self.world_model.save(tmp / "world_model")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)

    def load(self, path: Path) -> None:
        from safetensors.torch import load_file

        state = torch.load(path / "trainer.pt", weights_only=False)
        saved = state.get("freeze_encoder", False)  # checkpoints from before the option trained the encoder
        if saved != self.algo.cfg.freeze_encoder:  # the optimiser's parameters differ: Adam's state would not load
            raise ValueError(f"{path} was trained with algo.freeze_encoder={str(saved).lower()}; resume with the same "
                             f"setting (got {str(self.algo.cfg.freeze_encoder).lower()}) or start a new run")
        self.policy.load_state_dict(load_file(str(path / "policy" / "model.safetensors")), strict=False)
        self.algo.optimizer.load_state_dict(state["optimizer"])
        self.algo.ref_policy.load_state_dict(state["ref"])
        self.rng.bit_generator.state = state["rng"]
        if "null_rng" in state:  # checkpoints from before the null control lack it
            self.null_rng.bit_generator.state = state["null_rng"]
        self.update_idx, self.real_steps = state["update_idx"], state["real_steps"]
        self.train_seconds, self.history = state["train_seconds"], state["history"]
        # the pace of the max_minutes budgets; checkpoints from before these keys: warmed up if trained at all
        self.warmed_up = state.get("warmed_up", self.train_seconds > 0)
        self.warmup_seconds = state.get("warmup_seconds", 0.0)
        self.update_seconds = list(state.get("update_seconds", []))
        self.corrector.load_state_dict(json.loads((path / "corrector.json").read_text()))
        if self.world_model is not None and (path / "world_model").exists():
            self.world_model.load_weights(path / "world_model")
            self.wm_opt.load_state_dict(state["wm_opt"])
        log.info("resumed from %s at update %d", path, self.update_idx)

    def close(self) -> None:
        self.executor.close()


def _group_scores(groups: list[list[Rollout]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(num_groups, G) arrays of the world model's scores, their variances and the real outcomes (NaN where
    missing)."""
    return tuple(np.array([[getattr(r, name) for r in g] for g in groups], dtype=float)
                 for name in ("pred_score", "pred_var", "real_success"))


def _check_scores(checks: list[list[Rollout]] | None, shape: tuple[int, int], field: str = "pred_score"
                  ) -> np.ndarray | None:
    """(num_groups, G) world-model scores (or, ``field="real_success"``, replayed outcomes: NaN where not replayed)
    of the imagination-check rollouts, NaN rows where none; None without a check."""
    if checks is None:
        return None
    out = np.full(shape, np.nan)
    for i, c in enumerate(checks):
        if c:
            out[i] = [getattr(r, field) for r in c]
    return out


def _set_replay_outcomes(rollouts: list[Rollout], episodes, slack: int) -> None:
    """Each imagined rollout's true outcome: success within its imagined length (+ ``slack`` steps) of the simulator
    replaying its actions (``episodes`` in the rollouts' order)."""
    for r, ep in zip(rollouts, episodes, strict=True):
        r.real_success = float(any(f["next.success"] for f in ep.frames[:r.length + slack]))


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch CPU threads, then restore the previous count."""
    if n < 1:
        raise ValueError(f"torch thread count must be >= 1, got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_world_model_fits(world_model, executor) -> None:
    """Fail before any training when the world model was trained for other observations or actions."""
    wcfg = world_model.cfg
    space = executor.observation_space
    env_keys = sorted(executor.image_keys)
    what = executor.kind
    problems = []
    if sorted(wcfg.image_keys) != env_keys:
        problems.append(f"cameras: world model {sorted(wcfg.image_keys)} vs {what} {env_keys}")
    if wcfg.image_size != executor.image_size:
        problems.append(f"image size: world model {wcfg.image_size} px vs {what} {executor.image_size} px")
    if wcfg.action_dim != executor.action_space.shape[0]:
        problems.append(f"action dimension: world model {wcfg.action_dim} vs {what} {executor.action_space.shape[0]}")
    if wcfg.state_dim != space["observation.state"].shape[0]:
        problems.append(f"state dimension: world model {wcfg.state_dim} vs {what} {space['observation.state'].shape[0]}")
    if problems:
        raise ValueError(f"the world model does not fit {executor.name}: " + "; ".join(problems))


def rollouts_to_episode_data(rollouts: list[Rollout], image_keys: list[str]):
    """Real rollouts as world-model training data (sparse reward: 1 at a successful episode's last step)."""
    from vla_wmrl.train_world_model import assemble_episodes

    frames = torch.from_numpy(np.concatenate([np.concatenate([r.images[k] for k in image_keys], axis=-1)
                                              for r in rollouts])).permute(0, 3, 1, 2).contiguous()
    success = torch.from_numpy(np.concatenate([np.eye(1, r.length, r.length - 1)[0] * (r.real_success > 0.5)
                                               for r in rollouts])).float()
    return assemble_episodes(frames, torch.from_numpy(np.concatenate([r.state for r in rollouts])).float(),
                     torch.from_numpy(np.concatenate([r.action for r in rollouts])).float(), success.clone(), success,
                     [r.length for r in rollouts])


def write_side_by_side(rollouts: list[Rollout], video_dir: Path, fps: int) -> list[str]:
    """mp4 per rollout: real | imagined (open-loop replay of the same actions from the same start) | |difference|."""
    from vla_wmrl.eval import write_video

    video_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, r in enumerate(rollouts):
        if not r.frames_imagined:
            continue
        real = r.images[next(iter(r.images))][1:]  # frame t + 1 follows action t
        imag = np.stack(r.frames_imagined[: len(real)])
        diff = np.abs(real[: len(imag)].astype(int) - imag.astype(int)).astype(np.uint8)
        video = np.concatenate([real[: len(imag)], imag, diff], axis=2)
        path = video_dir / f"real_imagined_{i}_{'success' if r.real_success > 0.5 else 'failure'}.mp4"
        written.append(str(write_video(path, list(video), fps)))
    return written


# ------------------------------------------------------------------------------------------------- entry point
def run(cfg: DictConfig, run_dir: Path) -> dict:
    """Every stage of the pipeline; returns the summary (also written to ``run_dir/summary.json``)."""
    from torch.utils.tensorboard import SummaryWriter

    from vla_wmrl.executors import RobotExecutor, RobotRunConfig, SimExecutor

    sim = to_dataclass(SimConfig, cfg.sim) if cfg.get("sim") is not None else None
    dataset, robot_cfg = cfg.get("dataset"), cfg.get("robot")
    if sim is None and not dataset:
        raise ValueError("sim=none needs dataset=<LeRobotDataset path or repo id>: without a simulator the dataset "
                         "defines the task")
    if sim is not None and robot_cfg is not None:
        raise ValueError(f"robot={robot_cfg.get('type')} runs real episodes on a robot; drop sim={sim.name} "
                         f"(sim=none dataset=<the robot's dataset>)")
    robot_run = to_dataclass(RobotRunConfig, cfg.get("robot_run") or {})
    pipe = to_dataclass(PipelineConfig, cfg.pipeline)
    wcfg = to_dataclass(WMRLConfig, cfg.wmrl)  # both check their values before any stage runs
    algo_cfg = to_dataclass(GRPOConfig, cfg.algo)
    corr_cfg = _correction_config(cfg.correction, wcfg.mode)
    policy_cfg = OmegaConf.to_container(cfg.policy, resolve=True)
    wm_cfg = OmegaConf.to_container(cfg.world_model, resolve=True)
    # The stages (data, behaviour cloning, world-model training) have the machine to themselves: every core.
    torch.set_num_threads(wcfg.update_thread_count())
    torch.manual_seed(cfg.seed)
    cache = Path(cfg.cache_dir)
    t_start = time.perf_counter()

    demos = stage_data(cache, sim, pipe.demo_episodes, 0.0, seed=0) if sim is not None else Path(dataset)
    policy_path = Path(cfg.policy_path) if cfg.policy_path else stage_sft(cache, sim, policy_cfg, pipe, demos, cfg.seed)
    world_model, wm_data, wm_path = None, None, None
    if wcfg.mode != "sim":
        wm_datasets = [demos] if sim is None else [demos, stage_data(cache, sim, pipe.wm_episodes, pipe.wm_noise,
                                                                     seed=1000)]
        need_wm_data = bool(wcfg.wm_finetune_every or (wcfg.warmup_groups and wcfg.warmup_wm_steps))
        if sim is not None and pipe.policy_episodes and (need_wm_data or not cfg.world_model_path):
            wm_datasets.append(stage_policy_data(cache, sim, policy_path, pipe.policy_episodes, wcfg.explore_std,
                                                 seed=POLICY_DATA_SEED))
        wm_path = (Path(cfg.world_model_path) if cfg.world_model_path
                   else stage_world_model(cache, sim, wm_cfg, pipe, wm_datasets, cfg.seed))
        from vla_wmrl.train_world_model import load_episodes
        from world_models import load_world_model

        world_model = load_world_model(wm_path)
        if need_wm_data:
            wm_data = load_episodes(wm_datasets, list(world_model.cfg.image_keys))
    pipeline_seconds = time.perf_counter() - t_start
    torch.set_num_threads(wcfg.threads)  # rollouts: one thread beside the simulator workers

    from vla_wmrl.policies import load_policy

    policy = load_policy(policy_path, device="cpu")
    if sim is not None:
        executor = SimExecutor(sim, wcfg.horizon, wcfg.num_envs, eval_horizon=wcfg.eval_horizon or sim.horizon)
    else:
        executor = RobotExecutor(str(dataset), OmegaConf.to_container(robot_cfg, resolve=True) if robot_cfg else None,
                                 wcfg.horizon, robot_run, record_root=run_dir / "robot_episodes")
    try:
        trainer = WMRLTrainer(wcfg, executor, policy, world_model, corr_cfg, algo_cfg, run_dir, cfg.seed, wm_data)
    except BaseException:
        executor.close()
        raise
    ckpt = run_dir / "checkpoint"
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    try:
        if cfg.resume and ckpt.exists():
            trainer.load(ckpt)
        eval_seconds = [trainer.history[-1].get("eval_seconds", 0.0) if trainer.history else 0.0]  # the last
        # evaluation's duration: the final one's estimate

        def seconds_left() -> float | None:
            """The whole-run budget left once a final evaluation is set aside (None: no budget)."""
            if cfg.get("max_minutes") is None:
                return None
            return t_start + 60 * cfg.max_minutes - time.perf_counter() - eval_seconds[0]

        def record_eval(videos: bool = True) -> None:
            video_dir = run_dir / "videos" / f"update_{trainer.update_idx:04d}" if videos else None
            t_eval = time.perf_counter()
            ev = trainer.evaluate(wcfg.eval_episodes, video_dir)
            eval_seconds[0] = time.perf_counter() - t_eval
            trainer.history.append({"update": trainer.update_idx, "success_rate": ev["success_rate"],
                                    "real_steps_total": trainer.real_steps, "train_seconds": trainer.train_seconds,
                                    "eval_seconds": eval_seconds[0]})
            writer.add_scalar("eval/success_rate", ev["success_rate"], trainer.update_idx)
            writer.add_scalar("eval/success_rate_vs_seconds", ev["success_rate"], int(trainer.train_seconds))

        if not trainer.history:
            record_eval(videos=False)  # the base policy
        if trainer.update_idx == 0 and not trainer.warmed_up:  # a resumed run has its base and warm-up already
            left = seconds_left()
            if left is not None and left <= 0:
                log.warning("max_minutes=%g: the stages left no time for RL (%.1f min so far); raise max_minutes "
                            "(null = no budget)", cfg.max_minutes, (time.perf_counter() - t_start) / 60)
            else:
                for k, v in trainer.warmup().items():
                    writer.add_scalar(k if "/" in k else f"train/{k}", v, 0)
                if trainer.warmed_up:
                    trainer.save(ckpt)  # a run killed during update 1 resumes after its warm-up

        with tqdm(total=wcfg.updates, initial=trainer.update_idx, desc=f"wmrl[{wcfg.mode}]", unit="update") as bar:
            while trainer.update_idx < wcfg.updates and not trainer.out_of_time(seconds_left()):
                m = trainer.update()
                for k, v in m.items():
                    if isinstance(v, (int, float)) and np.isfinite(v):
                        writer.add_scalar(k if "/" in k else f"train/{k}", v, trainer.update_idx)
                if wcfg.eval_every and trainer.update_idx % wcfg.eval_every == 0:
                    record_eval()
                left = trainer.budget_left(seconds_left())  # the ETA counts updates; a budget may end the run first
                bar.set_postfix(anchor_w=f"{m.get('correction/anchor_weight', 1.0):.2f}",
                                success=f"{trainer.history[-1]['success_rate']:.2f}",
                                **({} if left is None else {"budget_left": f"{max(left, 0) / 60:.1f}min"}))
                bar.update(1)
                trainer.save(ckpt)
        if trainer.update_idx < wcfg.updates:
            log.warning("%s reached: stopped after %d of %d updates (%.0f s of RL, %.1f min so far)",
                        f"RL budget wmrl.max_minutes={wcfg.max_minutes:g}" if wcfg.max_minutes is not None and
                        trainer.out_of_time() else f"whole-run budget max_minutes={cfg.max_minutes:g}",
                        trainer.update_idx, wcfg.updates, trainer.train_seconds, (time.perf_counter() - t_start) / 60)
        if trainer.train_seconds > trainer.history[-1]["train_seconds"]:  # trained since the last evaluation
            record_eval()
            trainer.save(ckpt)
        final = trainer.history[-1]
        trainer.policy.save_pretrained(run_dir / "policy")
        summary = {"sim": sim.name if sim else None, "dataset": str(dataset) if sim is None else None,
                   "robot": robot_cfg.get("type") if robot_cfg else None, "mode": wcfg.mode,
                   "correction": asdict(corr_cfg), "updates": trainer.update_idx, "updates_planned": wcfg.updates,
                   "base_success_rate": trainer.history[0]["success_rate"],
                   "final_success_rate": final["success_rate"],
                   "improvement_points": 100 * (final["success_rate"] - trainer.history[0]["success_rate"]),
                   "real_env_steps": trainer.real_steps, "rl_seconds": trainer.train_seconds,
                   "pipeline_seconds": pipeline_seconds, "total_seconds": time.perf_counter() - t_start,
                   "history": trainer.history, "policy_path": str(run_dir / "policy"), "sft_policy": str(policy_path),
                   "world_model": str(wm_path) if wm_path else None, "eval_episodes": wcfg.eval_episodes,
                   "eval_horizon": getattr(executor, "eval_horizon", wcfg.horizon),
                   "max_minutes": cfg.get("max_minutes"),
                   "correction_stats": trainer.corrector.stats()}
    finally:
        writer.close()
        trainer.close()
    write_summary(run_dir, summary)
    return summary


def _correction_config(node: DictConfig, mode: str) -> CorrectionConfig:
    cfg = OmegaConf.to_container(node, resolve=True)
    cfg.pop("name", None)
    if "score_range" in cfg:
        cfg["score_range"] = tuple(cfg["score_range"])
    if mode != "wmrl":  # sim: every score is real; wm: no real scores to correct with
        cfg.update(debias=False, denoise=False)
    from dataclasses import fields

    valid = [f.name for f in fields(CorrectionConfig)]
    unknown = [k for k in cfg if k not in valid]
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for CorrectionConfig; valid keys: {valid}")
    return CorrectionConfig(**cfg)


@hydra.main(config_path="../configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    summary = run(cfg, run_dir)
    log.info("success %.2f -> %.2f (%+.1f points) in %d updates, %.0f s of RL, %d real steps; %s",
             summary["base_success_rate"], summary["final_success_rate"], summary["improvement_points"],
             summary["updates"], summary["rl_seconds"], summary["real_env_steps"], run_dir / "summary.json")
    return summary


if __name__ == "__main__":
    main()
