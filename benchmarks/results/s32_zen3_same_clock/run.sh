#!/usr/bin/env bash
# Driver for round s32 (PLAN.md). From the repository root: bash benchmarks/results/s32_zen3_same_clock/run.sh SEED...
# Round s30's protocol on the models this machine's default run built (cache/, empty at the start of session 31):
# per seed, WMRL (wmrl_both, 40 updates), then simulator RL given 3x the RL seconds WMRL just took; both final
# policies and the base held-out (100 episodes, seeds 300000+).
set -eu
R=benchmarks/results/s32_zen3_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/runs/sim $D/results.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both sim --budget-from wmrl_both --budget-fraction 3 --out $D -- \
    $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --paired wmrl_both sim --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
