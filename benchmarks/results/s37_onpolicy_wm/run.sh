#!/usr/bin/env bash
# Driver for round s37 (PLAN.md). From the repository root: bash benchmarks/results/s37_onpolicy_wm/run.sh SEED...
# Default WMRL (both corrections, 40 updates) with the world model trained on 300 policy rollouts; held-out 100 episodes.
set -eu
R=benchmarks/results/s37_onpolicy_wm
S32=benchmarks/results/s32_zen3_same_clock
PY=.venv/bin/python
WM=${WM:-cache/world_model-d8853aa255}
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=$WM/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/results.json
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s32
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S32/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
