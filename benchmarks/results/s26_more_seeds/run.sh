#!/usr/bin/env bash
# Driver for round s26 (PLAN.md). Run from the repository root: bash benchmarks/results/s26_more_seeds/run.sh 6 7 ...
set -u
R=benchmarks/results/s26_more_seeds
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.updates=20 wmrl.eval_every=0 wmrl.eval_episodes=20"
for s in "$@"; do
  if [ $((s % 2)) -eq 0 ]; then ARMS="wm wmrl_both"; else ARMS="wmrl_both wm"; fi
  echo "=== seed $s arms $ARMS start $(date -u +%H:%M:%S)"
  $PY benchmarks/wmrl_vs_sim.py --arms $ARMS --out $R/seed$s -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $R/seed$s --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
