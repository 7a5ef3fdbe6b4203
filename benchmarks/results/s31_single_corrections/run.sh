#!/usr/bin/env bash
# Driver for round s31 (PLAN.md). From the repository root: bash benchmarks/results/s31_single_corrections/run.sh SEED...
set -eu
R=benchmarks/results/s31_single_corrections
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache_s29/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  cp benchmarks/results/s30_same_clock/seed$s/heldout_eval.json $D/heldout_eval.json  # base (and s30's arms) reused
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_debias $D/runs/wmrl_denoise
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_debias wmrl_denoise --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
