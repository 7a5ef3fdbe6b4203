#!/usr/bin/env bash
# Driver for the session 24 round (PLAN.md). Run from the repository root.
set -u
R=benchmarks/results/s24_same_build
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.updates=20 wmrl.eval_every=0 wmrl.eval_episodes=20"
for s in 0 1 2 3 4 5 6 7; do
  if [ "$s" -ge 6 ] && [ "$(date -u +%H%M)" -ge 1635 ]; then echo "seed $s not started: past 16:35 UTC"; break; fi
  if [ $((s % 2)) -eq 0 ]; then ARMS="wm wmrl_both"; else ARMS="wmrl_both wm"; fi
  echo "=== seed $s arms $ARMS start $(date -u +%H:%M:%S)"
  .venv/bin/python benchmarks/wmrl_vs_sim.py --arms $ARMS --out $R/seed$s -- $COMMON seed=$s
  .venv/bin/python benchmarks/wmrl_seeds.py $R/seed$s --heldout-episodes 100 --paired wmrl_both wm --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
