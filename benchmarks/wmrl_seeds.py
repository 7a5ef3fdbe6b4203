"""Aggregate `benchmarks/wmrl_vs_sim.py` runs over seeds: one results directory per seed, same arms and settings.

    python benchmarks/wmrl_seeds.py benchmarks/results/wmrl_check_seed0 benchmarks/results/wmrl_check_seed1 ... \
        [--arms wmrl_both wmrl_none] [--out benchmarks/results/wmrl_check_seeds.json]

A directory given as ``DIR:arm1,arm2`` contributes only those arms (runs of one arm with different settings may sit
in different directories).

Prints, per arm, each seed's success at every evaluation and the mean and standard deviation over seeds of the gain
(final - base), of the final success and of the RL wall-clock, and writes them as JSON. An arm missing from a seed's
directory is reported over the seeds that have it.

``--heldout-episodes N`` also evaluates every run's final policy (``runs/<arm>/policy``) and the base policy they
started from on N held-out seeds (``--heldout-seed``, default 300000: disjoint from the trainer's evaluation
(100000+), training and warm-up seeds and the datasets'), deterministically, and reports those gains; the trainer's
own 40-episode evaluations
carry a ~0.08 standard error. Results are cached per directory in ``heldout_eval.json``. ``--paired A B`` adds the
per-seed difference of A's and B's held-out final success, and, where a directory holds the ``sim`` arm, the table
shows whether each arm's held-out final reached simulator RL's and at what fraction of its RL wall-clock.

``--diagnostics`` adds, per run, the mean over its updates of the correction's TensorBoard scalars
(``DIAGNOSTICS``: anchor weight, imagination gap and trust, ...), the fraction of updates whose imagined stream was
turned down (trust < 0.5) and where an update's time goes (``TIMINGS``: collection against the rest, mostly the GRPO
step), read from ``runs/<arm>/tensorboard``, to find what the seeds that fall behind share.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# Disjoint from every start state a run sees: evaluation 100000+, training 200000 + seed * 1e6 + ..., warm-up
# 400000 + seed * 1e6 + ... (vla_wmrl.train.WMRLTrainer). The earlier default, 200000, overlapped seed 0's training
# start states (200000 + update * groups + g).
HELDOUT_SEED = 300_000
DEFAULT_SEED = "0"  # configs/train.yaml's seed, for runs whose overrides do not set one
# TensorBoard scalars --diagnostics averages over a run's updates (absent tags, e.g. in the ``wm`` arm, are skipped).
DIAGNOSTICS = ("correction/anchor_weight", "correction/imagination_gap", "correction/imagination_trust",
               "correction/bias_removed", "train/anchor_success", "train/anchor_imagined_score",
               "train/imagined_pred_score", "train/anchor_update_share", "algo/kl", "algo/clip_frac",
               "correction/imagination_rank_corr", "correction/imagination_rank_trust")
# Where an update's time goes, averaged over the updates only (step >= 1; the warm-up logs at step 0): collection (the
# simulator groups, the imagined ones beside them), the whole update, and the rest of it (the GRPO step, mostly).
TIMINGS = ("train/update_seconds", "train/collect_seconds", "train/real_steps_per_s", "train/imagined_steps_per_s")
# For these (all in DIAGNOSTICS), also the mean over the first and the last quarter of a run's updates: a world model
# the policy learns to exploit shows as imagined scores that climb while the real outcomes of the same start states do
# not.
TRENDS = ("correction/imagination_gap", "train/anchor_imagined_score", "train/anchor_success",
          "correction/imagination_rank_corr")


def _override(overrides: list[str], key: str, default: str | None = None) -> str:
    for o in overrides:
        if o.lstrip("+").startswith(key + "="):
            return o.split("=", 1)[1]
    if default is None:
        raise KeyError(f"no {key}= among the run's overrides {overrides}")
    return default


def _sd(x) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


def _se(x) -> float:
    return _sd(x) / np.sqrt(len(x)) if len(x) > 1 else float("nan")


def heldout_eval(dirs: list[tuple[Path, set[str] | None]], arms: list[str] | None, episodes: int, seed: int,
                 num_envs: int = 2) -> dict:
    """{dir: {arm or "base": evaluate() summary}} for each run's final policy and its base, on held-out seeds."""
    import functools

    import torch
    from hydra import compose, initialize_config_dir

    from vla_wmrl.config import SimConfig, to_dataclass
    from vla_wmrl.eval import evaluate
    from vla_wmrl.policies import load_policy

    torch.set_num_threads(1)
    key = f"seed{seed}_x{episodes}"
    config_dir = str(Path(__file__).resolve().parent.parent / "configs")
    bases: dict[tuple[str, str], dict] = {}  # (policy path, sim) -> result: the base is evaluated once
    out = {}

    @functools.cache
    def sim_config(sim_name: str) -> SimConfig:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            return to_dataclass(SimConfig, compose("eval", overrides=[f"sim={sim_name}"]).sim)

    def run_eval(path: str, sim_name: str, label: str) -> dict:
        print(f"evaluating {label} ({path}) on {episodes} held-out episodes", flush=True)
        r = evaluate(load_policy(path, device="cpu"), sim_config(sim_name), episodes, num_envs=num_envs, seed=seed)
        return {k: r[k] for k in ("success_rate", "successes", "episodes", "seeds", "per_episode")} | {"policy": path}

    for spec in dirs:
        d = spec[0]
        cache_path = d / "heldout_eval.json"
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
        cache.setdefault(key, {})
        for arm, r in selected(spec, arms).items():
            base_path, sim_name = _override(r["overrides"], "policy_path"), _override(r["overrides"], "sim")
            if (base_path, sim_name) not in bases:
                bases[(base_path, sim_name)] = cache[key].get("base") or run_eval(base_path, sim_name, "base")
            cache[key]["base"] = bases[(base_path, sim_name)]
            if arm not in cache[key]:
                policy = d / "runs" / arm / "policy"
                if not (policy / "model.safetensors").exists():
                    raise FileNotFoundError(f"{policy}: the run's final policy is missing; rerun {arm} in {d}")
                cache[key][arm] = run_eval(str(policy), sim_name, f"{d.name}/{arm}")
            cache_path.write_text(json.dumps(cache, indent=1))  # after every evaluation: an interruption keeps them
        out.setdefault(str(d), {}).update(cache[key])
    return out


def quarter_means(values: list[float]) -> tuple[float, float]:
    """Means of the first and the last quarter of a series (at least one value each)."""
    n = max(1, len(values) // 4)
    return float(np.mean(values[:n])), float(np.mean(values[-n:]))


def run_diagnostics(run_dir: Path) -> dict:
    """Mean over updates of each ``DIAGNOSTICS`` and ``TIMINGS`` scalar a run logged, the first- and last-quarter means
    of each ``TRENDS`` scalar, the fraction of updates with the imagined stream's trust below 0.5, and an update's
    seconds outside collection (``{}`` when the run has no TensorBoard events)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted((run_dir / "tensorboard").glob("events*"))
    if not events:
        return {}
    acc = EventAccumulator(str(events[-1]), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # TRENDS among them; NaN entries (e.g. the ranking correlation before its first group) are left out
    series = {tag: [e.value for e in acc.Scalars(tag) if np.isfinite(e.value)] for tag in DIAGNOSTICS if tag in tags}
    series = {tag: values for tag, values in series.items() if values}
    out = {tag: float(np.mean(values)) for tag, values in series.items()}
    for tag in TIMINGS:
        values = [e.value for e in acc.Scalars(tag) if e.step >= 1] if tag in tags else []
        if values:
            out[tag] = float(np.mean(values))
    for tag in TRENDS:
        if tag in series:
            out[f"{tag}_first_quarter"], out[f"{tag}_last_quarter"] = quarter_means(series[tag])
    if {"train/update_seconds", "train/collect_seconds"} <= out.keys():
        out["train/update_minus_collect_seconds"] = out["train/update_seconds"] - out["train/collect_seconds"]
    if "correction/imagination_trust" in series:
        out["trust_below_half"] = float(np.mean(np.array(series["correction/imagination_trust"]) < 0.5))
    return out


def parse_dir(spec: str) -> tuple[Path, set[str] | None]:
    """``DIR`` or ``DIR:arm1,arm2``."""
    path, _, arms = spec.partition(":")
    return Path(path), set(arms.split(",")) if arms else None


def selected(spec: tuple[Path, set[str] | None], arms: list[str] | None) -> dict:
    """The directory's results.json restricted to the requested arms."""
    d, only = spec
    path = d / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass directories written by benchmarks/wmrl_vs_sim.py")
    return {arm: r for arm, r in json.loads(path.read_text()).items()
            if (not arms or arm in arms) and (only is None or arm in only)}


def aggregate(dirs: list[tuple[Path, set[str] | None]], arms: list[str] | None = None) -> dict:
    per_arm: dict[str, list[dict]] = {}
    for spec in dirs:
        d = spec[0]
        for arm, r in selected(spec, arms).items():
            per_arm.setdefault(arm, []).append({"dir": str(d),
                                                "seed": int(_override(r["overrides"], "seed", DEFAULT_SEED)),
                                                "curve": [h["success_rate"] for h in r["history"]],
                                                "base": r["base_success_rate"], "final": r["final_success_rate"],
                                                "rl_seconds": r["rl_seconds"], "real_steps": r["real_env_steps"]})
    out: dict = {}
    for arm, runs in per_arm.items():
        gain = np.array([r["final"] - r["base"] for r in runs])
        final = np.array([r["final"] for r in runs])
        secs = np.array([r["rl_seconds"] for r in runs])
        out[arm] = {"seeds": len(runs), "runs": runs, "gain_mean": float(gain.mean()), "gain_sd": _sd(gain),
                    "final_mean": float(final.mean()), "final_sd": _sd(final), "rl_seconds_mean": float(secs.mean()),
                    "real_steps_mean": float(np.mean([r["real_steps"] for r in runs]))}
    return out


def heldout_table(table: dict, held: dict, paired: list[str] | None) -> dict:
    """Adds held-out figures to ``table`` (in place): per-seed final success, gain over the base, paired differences
    (matched by seed), and whether each arm's held-out final reached the same seed's simulator RL (arm ``sim``) and
    at what fraction of its RL wall-clock."""
    sim_runs = {r["seed"]: r for r in table.get("sim", {}).get("runs", [])}
    for arm, a in table.items():
        finals, bases, reach = [], [], []
        for r in a["runs"]:
            h = held[r["dir"]]
            finals.append(h[arm]["success_rate"])
            bases.append(h["base"]["success_rate"])
            if arm != "sim" and r["seed"] in sim_runs:
                sim = sim_runs[r["seed"]]
                sim_final = held[sim["dir"]]["sim"]["success_rate"]
                reach.append({"seed": r["seed"], "sim_final": sim_final,
                              "reached_sim_final": h[arm]["success_rate"] >= sim_final,
                              "fraction_of_sim_time": r["rl_seconds"] / sim["rl_seconds"]})
        gains = np.array(finals) - np.array(bases)
        a["heldout"] = {"finals": finals, "bases": bases, "final_mean": float(np.mean(finals)), "final_sd": _sd(finals),
                        "gain_mean": float(gains.mean()), "gain_sd": _sd(gains), "gain_se": _se(gains),
                        "episodes_per_seed": held[a["runs"][0]["dir"]][arm]["episodes"], "vs_sim": reach}
    if paired:
        a_arm, b_arm = paired
        b_runs = {r["seed"]: r for r in table[b_arm]["runs"]}
        pairs = [(r, b_runs[r["seed"]]) for r in table[a_arm]["runs"] if r["seed"] in b_runs]
        diff = np.array([held[ra["dir"]][a_arm]["success_rate"] - held[rb["dir"]][b_arm]["success_rate"]
                         for ra, rb in pairs])
        table["paired"] = {"a": a_arm, "b": b_arm, "seeds": [ra["seed"] for ra, _ in pairs], "diffs": diff.tolist(),
                           "mean": float(diff.mean()), "sd": _sd(diff), "se": _se(diff),
                           "a_ahead": int((diff > 0).sum()), "ties": int((diff == 0).sum())}
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=parse_dir,
                        help="wmrl_vs_sim.py output directories (DIR or DIR:arm1,arm2)")
    parser.add_argument("--arms", nargs="+", default=None, help="only these arms (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write (default: print only)")
    parser.add_argument("--heldout-episodes", type=int, default=0, help="evaluate final and base policies on N "
                        "held-out episodes (0: off)")
    parser.add_argument("--heldout-seed", type=int, default=HELDOUT_SEED)
    parser.add_argument("--paired", nargs=2, metavar=("A", "B"), default=None,
                        help="per-seed difference of A's and B's held-out final success")
    parser.add_argument("--diagnostics", action="store_true",
                        help="per run, the mean of the correction's TensorBoard scalars over its updates (and over the "
                        "first and last quarter for the imagination gap, imagined and real anchor success)")
    args = parser.parse_args()
    table = aggregate(args.dirs, args.arms)
    print("| arm | seeds | success per seed (base -> ... -> final) | gain mean +- sd (points) | final mean +- sd | "
          "RL s | real steps |\n|---|---|---|---|---|---|---|")
    for arm, a in table.items():
        curves = "; ".join(" -> ".join(f"{x:.2f}" for x in r["curve"]) for r in a["runs"])
        print(f"| {arm} | {a['seeds']} | {curves} | {100 * a['gain_mean']:+.1f} +- {100 * a['gain_sd']:.1f} | "
              f"{a['final_mean']:.3f} +- {a['final_sd']:.3f} | {a['rl_seconds_mean']:.0f} | "
              f"{a['real_steps_mean']:.0f} |")
    if args.heldout_episodes:
        held = heldout_eval(args.dirs, args.arms, args.heldout_episodes, args.heldout_seed)
        heldout_table(table, held, args.paired)
        print(f"\nheld-out evaluation: {args.heldout_episodes} episodes per policy, seeds {args.heldout_seed}+")
        print("| arm | seeds | final per seed | base | gain mean +- sd (s.e.) | reached sim's final (fraction of sim's "
              "time) |\n|---|---|---|---|---|---|")
        for arm, a in table.items():
            if arm == "paired":
                continue
            h = a["heldout"]
            vs = "; ".join(f"{'yes' if v['reached_sim_final'] else 'no'} ({v['fraction_of_sim_time']:.2f})"
                           for v in h["vs_sim"]) or "-"
            print(f"| {arm} | {a['seeds']} | {', '.join(f'{x:.2f}' for x in h['finals'])} | "
                  f"{', '.join(sorted({f'{x:.2f}' for x in h['bases']}))} | {100 * h['gain_mean']:+.1f} +- "
                  f"{100 * h['gain_sd']:.1f} ({100 * h['gain_se']:.1f}) | {vs} |")
        if "paired" in table:
            p = table["paired"]
            print(f"paired {p['a']} - {p['b']}: {', '.join(f'{100 * x:+.0f}' for x in p['diffs'])} -> "
                  f"{100 * p['mean']:+.1f} +- {100 * p['sd']:.1f} (s.e. {100 * p['se']:.1f}); {p['a']} ahead on "
                  f"{p['a_ahead']} of {len(p['diffs'])} seeds ({p['ties']} ties)")
    if args.diagnostics:
        print("\nper-run diagnostics (mean over updates; trust<0.5: fraction of updates with the imagined stream "
              "turned down)")
        for arm, a in table.items():
            if arm == "paired":
                continue
            for i, r in enumerate(a["runs"]):
                r["diagnostics"] = run_diagnostics(Path(r["dir"]) / "runs" / arm)
                held_final = a.get("heldout", {}).get("finals", [None] * len(a["runs"]))[i]
                cells = ", ".join(f"{k.split('/')[-1]}={v:.3f}" for k, v in r["diagnostics"].items()) or "no events"
                print(f"  {arm} seed {r['seed']}" + (f" held-out {held_final:.2f}" if held_final is not None else "")
                      + f": {cells}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(table, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
