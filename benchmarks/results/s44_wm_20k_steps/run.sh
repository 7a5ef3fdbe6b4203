#!/usr/bin/env bash
# Driver for round s44 (PLAN.md). From the repository root: bash benchmarks/results/s44_wm_20k_steps/run.sh SEED...
# Default WMRL (wmrl_both, 40 updates) from policy 5b3f184f with the world model trained 20000 steps instead of 10000
# (cache/world_model-65ffe78e0b: make train's world-model stage with pipeline.wm_steps=20000
# pipeline.wm_minutes=120, every other input the default's); held-out 100 episodes.
set -eu
R=benchmarks/results/s44_wm_20k_steps
S30=benchmarks/results/s30_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-65ffe78e0b/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/wm20k_seed$s
  mkdir -p $D/runs
  echo "=== wm20k seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/results.json
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s30
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S30/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_wm20k_seed$s.json
  echo "=== wm20k seed $s done $(date -u +%H:%M:%S)"
done
