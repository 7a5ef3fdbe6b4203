#!/usr/bin/env bash
# Round s36's continuation (PLAN.md): the frozen-backbone WMRL arm alone (no simulator RL), held-out, for P2.
set -eu
R=benchmarks/results/s36_frozen_backbone
S32=benchmarks/results/s32_zen3_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40 algo.freeze_encoder=backbone"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/results.json
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S32/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
