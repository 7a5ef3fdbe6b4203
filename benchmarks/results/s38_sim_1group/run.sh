#!/usr/bin/env bash
# Driver for round s38 (PLAN.md). From the repository root: bash benchmarks/results/s38_sim_1group/run.sh SEED...
# Simulator RL on WMRL's real-data budget (arm sim_1group: one real group of 8 per update, 42 updates = WMRL's 2
# warm-up groups + 40 anchor groups), from the same policy as rounds s32/s33; held-out 100 episodes.
set -eu
R=benchmarks/results/s38_sim_1group
S32=benchmarks/results/s32_zen3_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=42"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/sim_1group $D/results.json
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s32
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S32/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms sim_1group --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
