"""Does the world model's imagination rank the policy's rollouts the way the simulator does?

GRPO in the world model learns only from the *within-group* ranking of imagined rollouts (advantages are standardised
per start state). This measures that signal directly. For ``--starts`` seeded start states, ``--group`` rollouts each:

- **imagined**: the policy acts closed-loop in the world model (exactly as a WMRL imagined group); each rollout's score
  is the world model's success probability at its last step. Its action sequence is then **replayed open-loop in the
  simulator** from the same seeded reset (the scene is deterministic), which gives the true outcome of *those actions*
  (success at any step up to the imagined length).
- **real**: the policy acts closed-loop in the simulator (as a WMRL anchor group); each rollout is replayed open-loop in
  the world model from its first frame with its actions (as the calibrator's pairs).

For both it reports the outcome-vs-score AUROC over all rollouts, the within-group AUROC (pairs of one group with
different outcomes, pooled), the correlation of group-standardised scores with group-standardised outcomes (the GRPO
advantage signal; 0 = no signal, 1 = the simulator's own advantages) and the correlation of group means, each with a
bootstrap 90% interval over start states. A random score gives 0.5 / 0.5 / 0 / 0.

    python benchmarks/imagination_fidelity.py --policy outputs/sft/lift10/pretrained_model \
        --world-model outputs/train_world_model/robosuite_lift_conv/checkpoints/last [--starts 24 --group 8]

Prints a table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np
import torch
from omegaconf import OmegaConf

from vla_wmrl.eval_world_model import auroc
from vla_wmrl.imagination import observations_at

ROOT = Path(__file__).resolve().parents[1]
SEED_BASE = 700_000  # start states not used by training (200k), warm-up (400k) or evaluation (100k)


def metrics(score: np.ndarray, outcome: np.ndarray) -> dict:
    """(K, G) scores and 0/1 outcomes -> the fidelity figures (see the module docstring)."""
    wins = ties = pairs = 0.0
    zs, zo = [], []
    for s, o in zip(score, outcome):
        diff = s[o > 0.5][:, None] - s[o <= 0.5][None, :]
        wins, ties, pairs = wins + (diff > 0).sum(), ties + (diff == 0).sum(), pairs + diff.size
        if o.std() > 0 and s.std() > 0:
            zs.append((s - s.mean()) / s.std())
            zo.append((o - o.mean()) / o.std())
    adv = float(np.corrcoef(np.concatenate(zs), np.concatenate(zo))[0, 1]) if zs else float("nan")
    gm_s, gm_o = score.mean(1), outcome.mean(1)
    group = float(np.corrcoef(gm_s, gm_o)[0, 1]) if gm_s.std() > 0 and gm_o.std() > 0 else float("nan")
    return {"auroc": auroc(score.ravel(), outcome.ravel()),
            "within_group_auroc": float((wins + 0.5 * ties) / pairs) if pairs else float("nan"),
            "advantage_corr": adv, "group_mean_corr": group, "mixed_groups": len(zs),
            "mean_score": float(score.mean()), "mean_outcome": float(outcome.mean())}


def with_interval(score: np.ndarray, outcome: np.ndarray, boot: int, rng: np.random.Generator) -> dict:
    out = metrics(score, outcome)
    samples = {k: [] for k in ("auroc", "within_group_auroc", "advantage_corr", "group_mean_corr")}
    for _ in range(boot):
        idx = rng.integers(len(score), size=len(score))
        m = metrics(score[idx], outcome[idx])
        for k in samples:
            samples[k].append(m[k])
    for k, v in samples.items():
        v = np.asarray(v)
        v = v[np.isfinite(v)]
        out[f"{k}_90ci"] = [float(np.quantile(v, 0.05)), float(np.quantile(v, 0.95))] if len(v) else None
    return out


BUCKETS = ((1, 5), (6, 15), (16, 30), (31, 10_000))  # imagined steps since the real start frame


@torch.no_grad()
def action_drift(imagined_env, policy, rollouts, explore_std: float) -> dict:
    """How far the policy's action moves when it sees the world model's observation instead of the real one.

    Each real rollout is replayed open-loop in the world model (its real actions); at every step the policy's
    deterministic action is computed on the real observation, on the imagined one, and on the two mixtures (imagined
    image + real state, real image + imagined state). Returns, per bucket of steps since the start, the mean absolute
    action difference to the real-observation action (action units, [-1, 1] box), and the imagined state's mean
    absolute error in units of the real states' standard deviation. For scale, ``exploration_noise`` is the mean
    absolute action change the exploration noise itself makes on real observations."""
    from vla_wmrl.policies import RolloutAdapter
    from vla_wmrl.policies.base import obs_to_batch

    adapter = RolloutAdapter(policy, deterministic=True)
    keys = list(rollouts[0].images)
    T = max(r.length for r in rollouts)
    imagined_obs, _ = imagined_env.reset(observations_at(rollouts, [0] * len(rollouts)))
    state_sd = np.concatenate([r.state for r in rollouts]).std(0) + 1e-6
    sums = {name: np.zeros(len(BUCKETS)) for name in ("imagined", "imagined_image", "imagined_state", "state_error")}
    counts, noise = np.zeros(len(BUCKETS)), []
    for t in range(1, T):
        alive = np.array([t < r.length for r in rollouts])
        actions = np.stack([r.action[min(t - 1, r.length - 1)] for r in rollouts])
        imagined_obs, *_ = imagined_env.step(actions)
        b = next(i for i, (lo, hi) in enumerate(BUCKETS) if lo <= t <= hi)
        real = observations_at(rollouts, [min(t, r.length - 1) for r in rollouts])
        im_state = np.asarray(imagined_obs["observation.state"])
        variants = {"imagined": {**real, **{k: imagined_obs[k] for k in keys}, "observation.state": im_state},
                    "imagined_image": {**real, **{k: imagined_obs[k] for k in keys}},
                    "imagined_state": {**real, "observation.state": im_state}}
        a_real = adapter.act(real, {})
        for name, obs in variants.items():
            sums[name][b] += np.abs(adapter.act(obs, {}) - a_real).mean(1)[alive].sum()
        sums["state_error"][b] += (np.abs(im_state - real["observation.state"]) / state_sd).mean(1)[alive].sum()
        counts[b] += alive.sum()
        if t % 10 == 1:  # the exploration noise's own effect, on real observations
            mean, _ = policy._distribution(obs_to_batch(real, policy.config.input_features, adapter.device))
            u = mean + explore_std * torch.randn_like(mean)
            noise.append(float((torch.tanh(u) - torch.tanh(mean)).abs().mean()))
    names = [f"{lo}-{hi}" if hi < 10_000 else f"{lo}+" for lo, hi in BUCKETS]
    out = {name: {b: float(v / max(c, 1)) for b, v, c in zip(names, sums[name], counts)} for name in sums}
    out["steps"] = {b: int(c) for b, c in zip(names, counts)}
    out["exploration_noise"] = float(np.mean(noise)) if noise else float("nan")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, help="saved policy directory (pretrained_model)")
    parser.add_argument("--world-model", required=True, help="world-model checkpoint directory")
    parser.add_argument("--sim", default="robosuite_lift", help="configs/sim/<name>.yaml")
    parser.add_argument("--starts", type=int, default=24, help="start states (groups)")
    parser.add_argument("--group", type=int, default=8, help="rollouts per start state")
    parser.add_argument("--horizon", type=int, default=60, help="steps per rollout (wmrl.horizon)")
    parser.add_argument("--explore-std", type=float, default=0.1, help="pre-tanh exploration std (wmrl.explore_std)")
    parser.add_argument("--rows", nargs="*", default=["reset", "branch"], choices=["reset", "branch"],
                        help="imagined rows besides the real one (and the action drift, always measured)")
    parser.add_argument("--branch-horizon", type=int, default=20, help="steps of the imagined branches")
    parser.add_argument("--slack", type=int, default=5,
                        help="steps a replay may take beyond the imagined length to succeed")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/imagination_fidelity.json"))
    args = parser.parse_args()

    from vla_wmrl.config import SimConfig, to_dataclass
    from vla_wmrl.executors import SimExecutor
    from vla_wmrl.imagination import from_episode, imagine, repeat_obs, score_in_world_model
    from vla_wmrl.policies import RolloutAdapter, load_policy, set_exploration_std
    from world_models import ImaginedVectorEnv, load_world_model

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    sim = to_dataclass(SimConfig, OmegaConf.load(ROOT / "configs/sim" / f"{args.sim}.yaml"))
    G, K, H = args.group, args.starts, args.horizon
    # The simulator runs long enough to replay a branch from any step of a real rollout (plus the slack); every
    # outcome below is read from the per-step success flags, so the longer limit changes none of them.
    executor = SimExecutor(sim, H + args.branch_horizon + args.slack, args.num_envs)
    seconds = {}

    def replay(prefixes: list[np.ndarray], rollouts, seeds: list[int], lengths: list[int]) -> np.ndarray:
        """Play prefix + imagined actions in the simulator from each seeded reset; 1 if it succeeds within the
        prefix's length + the imagined rollout's length + slack steps (the world model ends a rollout once it
        predicts success, possibly a few steps early)."""
        t0 = time.perf_counter()
        seqs = [np.concatenate([p, r.action]).astype(np.float32) for p, r in zip(prefixes, rollouts)]
        out = [float(any(f["next.success"] for f in ep.frames[:n + args.slack]))
               for ep, n in zip(executor.replay(seqs, seeds, cameras=False), lengths)]
        seconds.setdefault("replay_in_sim", 0.0)
        seconds["replay_in_sim"] += time.perf_counter() - t0
        return np.array(out)

    try:
        policy = load_policy(args.policy, executor.envs, device="cpu")
        set_exploration_std(policy, args.explore_std)
        adapter = RolloutAdapter(policy)
        imagined_env = ImaginedVectorEnv(load_world_model(args.world_model), horizon=H, seed=args.seed)
        seeds = [SEED_BASE + args.seed * 10_000 + k for k in range(K)]
        group_seeds = [s for s in seeds for _ in range(G)]
        image_keys = list(executor.image_keys)
        rows = {}

        # 1. Closed-loop in the simulator, each rollout scored open-loop in the world model (the calibrator's pairs).
        t0 = time.perf_counter()
        real_by_seed = {s: [] for s in seeds}
        for ep in executor.run(RolloutAdapter(policy), group_seeds):
            ep.frames = ep.frames[:H]  # the trainer's horizon
            ep.success = bool(ep.frames[-1]["next.success"])
            real_by_seed[ep.seed].append(from_episode(ep, image_keys))
        real = [r for s in seeds for r in real_by_seed[s]]
        score_in_world_model(imagined_env, real)
        rows["real"] = (np.array([r.pred_score for r in real]).reshape(K, G),
                        np.array([r.real_success for r in real]).reshape(K, G))
        seconds["real_and_score"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        drift = action_drift(imagined_env, policy, real, args.explore_std)
        seconds["action_drift"] = time.perf_counter() - t0

        # 2. Imagined from the seeded resets (imagine_from=reset), replayed in the simulator.
        if "reset" in args.rows:
            t0 = time.perf_counter()
            imagined = imagine(imagined_env, adapter, repeat_obs(executor.start_observations(seeds), G), H)
            seconds["imagine_reset"] = time.perf_counter() - t0
            empty = np.zeros((0, imagined[0].action.shape[1]), np.float32)
            rows["reset"] = (np.array([r.pred_score for r in imagined]).reshape(K, G),
                             replay([empty] * len(imagined), imagined, group_seeds, [r.length for r in imagined])
                             .reshape(K, G))

        # 3. Imagined branches from a random step of a real rollout (imagine_from=real, imagine_horizon), replayed
        # in the simulator as the real rollout's actions up to that step followed by the imagined ones.
        if "branch" in args.rows:
            picks = [real_by_seed[s][0] for s in seeds]
            steps = [int(rng.integers(r.length)) for r in picks]
            start = observations_at(picks, steps)
            t0 = time.perf_counter()
            branches = imagine(imagined_env, adapter, repeat_obs(start, G), args.branch_horizon)
            seconds["imagine_branch"] = time.perf_counter() - t0
            prefixes = [r.action[:t] for r, t in zip(picks, steps) for _ in range(G)]
            rows["branch"] = (np.array([r.pred_score for r in branches]).reshape(K, G),
                              replay(prefixes, branches, group_seeds,
                                     [len(p) + r.length for p, r in zip(prefixes, branches)]).reshape(K, G))
    finally:
        executor.close()

    names = {"real": ("simulator (closed loop)", "world-model replay of its actions"),
             "reset": ("world model from the reset (imagine_from=reset)", "world model; outcome: sim replay"),
             "branch": (f"world model, {args.branch_horizon}-step branch from a real rollout (imagine_from=real)",
                        "world model; outcome: sim replay")}
    result = {name: with_interval(score, outcome, args.bootstrap, rng) for name, (score, outcome) in rows.items()}
    # Group level: does imagination know which start states are hard? Imagined success vs real closed-loop success.
    if "reset" in rows:
        a, b = rows["reset"][0].mean(1), rows["real"][1].mean(1)
        result["reset_imagined_vs_real_group_success_corr"] = (float(np.corrcoef(a, b)[0, 1])
                                                               if a.std() > 0 and b.std() > 0 else float("nan"))
    result["action_drift"] = drift
    result["config"] = {**vars(args), "seeds": [seeds[0], seeds[-1]]}
    result["seconds"] = seconds
    result["per_group"] = {name: {"score": score.round(4).tolist(), "outcome": outcome.tolist()}
                           for name, (score, outcome) in rows.items()}

    print(f"\n{K} start states x {G} rollouts, horizon {H}, explore std {args.explore_std}, success slack {args.slack}")
    print("| rollouts generated in | scored by | mean score | mean outcome | mixed groups | AUROC | within-group AUROC "
          "| advantage corr | group-mean corr |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in rows:
        m = result[name]
        fmt = lambda k: f"{m[k]:.3f} [{m[k + '_90ci'][0]:.2f}, {m[k + '_90ci'][1]:.2f}]" if m[k + "_90ci"] else "nan"
        print(f"| {names[name][0]} | {names[name][1]} | {m['mean_score']:.3f} | {m['mean_outcome']:.3f} | "
              f"{m['mixed_groups']}/{K} | {fmt('auroc')} | {fmt('within_group_auroc')} | {fmt('advantage_corr')} | "
              f"{fmt('group_mean_corr')} |")
    if "reset" in rows:
        print(f"imagined (from the reset) group success vs real closed-loop group success: corr "
              f"{result['reset_imagined_vs_real_group_success_corr']:.3f}")
    print(f"\nPolicy action drift on world-model observations (real rollouts replayed open-loop; mean |action "
          f"difference| to the action on the real observation; exploration noise itself: "
          f"{drift['exploration_noise']:.3f})")
    print("| steps since the real frame | imagined image + state | imagined image only | imagined state only "
          "| state error (sd units) |")
    print("|---|---|---|---|---|")
    for b in drift["steps"]:
        print(f"| {b} | {drift['imagined'][b]:.3f} | {drift['imagined_image'][b]:.3f} | "
              f"{drift['imagined_state'][b]:.3f} | {drift['state_error'][b]:.3f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
