#!/usr/bin/env bash
# Driver for round s41 (PLAN.md). From the repository root: bash benchmarks/results/s41_sim_1group_same_clock_avx512/run.sh SEED...
# Simulator RL with one real group per update (arm sim_1group) given the RL wall-clock that default WMRL took on the
# same seed, policy and machine in round s40 (session 39), as many updates as fit; held-out 100 episodes.
set -eu
R=benchmarks/results/s41_sim_1group_same_clock_avx512
S40=benchmarks/results/s40_sim_1group_full_wm
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=1000"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  # WMRL's RL seconds on this seed, in minutes: the budget
  BUDGET=$($PY -c "import json,sys; print(round(json.load(open(sys.argv[1]))['wmrl_both']['rl_seconds'] / 60, 4))" $S40/seed$s/results.json)
  echo "=== seed $s start $(date -u +%H:%M:%S) budget ${BUDGET} min"
  rm -rf $D/runs/sim_1group $D/results.json
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S40/seed$s/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms sim_1group --out $D -- $COMMON wmrl.max_minutes=$BUDGET seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
