#!/usr/bin/env bash
# Round s44's world-model diagnostic (after the WMRL runs; reported, decides nothing): both world models scored by
# python -m vla_wmrl.eval_world_model on 40 held-out rollouts of the BC policy (the collection of
# benchmarks/results/wm_precision_quality.json: seeds 950000+, explore_std 0.1, never trained on).
set -eu
R=benchmarks/results/s44_wm_20k_steps
PY=.venv/bin/python
D=data/robosuite_lift/bc_heldout_40
[ -d $D ] || $PY -m vla_wmrl.collect sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model \
  explore_std=0.1 episodes=40 seed=950000 root=$D repo_id=local/bc_heldout_40
for wm in a00cd38dce:10000 65ffe78e0b:20000; do
  h=${wm%%:*} n=${wm##*:}
  $PY -m vla_wmrl.eval_world_model sim=robosuite_lift checkpoint=cache/world_model-$h/checkpoints/last dataset=$D \
    videos=1 hydra.run.dir=/tmp/s44_wm_eval_$n
  cp /tmp/s44_wm_eval_$n/summary.json $R/wm_eval_steps$n.json
done
