#!/usr/bin/env bash
# Driver for the session 25 round (PLAN.md, "Fixed by session 25"). Run from the repository root.
set -u
R=benchmarks/results/s25_gap_z
S24=benchmarks/results/s24_same_build
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.updates=20 wmrl.eval_every=0 wmrl.eval_episodes=20"
echo "=== step 0: wm seed 0 start $(date -u +%H:%M:%S)"
$PY benchmarks/wmrl_vs_sim.py --arms wm --out $R/seed0_wmcheck -- $COMMON seed=0
a=$(sha256sum < $R/seed0_wmcheck/runs/wm/policy/model.safetensors); b=$(sha256sum < $S24/seed0/runs/wm/policy/model.safetensors)
if [ "$a" = "$b" ]; then DESIGN=B; SEEDS="0 1 2 3 4 5 6"; else DESIGN=A; SEEDS="0 1 2 3 4 5"; fi
echo "=== step 0 done $(date -u +%H:%M:%S): policy $a vs session 24 $b -> design $DESIGN" | tee $R/design.txt
for s in $SEEDS; do
  if [ "$(date -u +%H%M)" -ge 1915 ]; then echo "seed $s not started: past 19:15 UTC"; break; fi
  if [ $DESIGN = B ]; then
    if [ $((s % 2)) -eq 0 ]; then ARMS="wmrl_both_gapz wmrl_both_nogap"; else ARMS="wmrl_both_nogap wmrl_both_gapz"; fi
  else
    if [ $((s % 2)) -eq 0 ]; then ARMS="wm wmrl_both_gapz"; else ARMS="wmrl_both_gapz wm"; fi
  fi
  echo "=== seed $s arms $ARMS start $(date -u +%H:%M:%S)"
  $PY benchmarks/wmrl_vs_sim.py --arms $ARMS --out $R/seed$s -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $R/seed$s --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
