#!/usr/bin/env bash
# Driver for round s43 (PLAN.md). From the repository root: bash benchmarks/results/s43_bf16_update_fixed/run.sh ARM:SEED...
# ARM bf16: default WMRL (wmrl_both, 40 updates) with algo.precision=bf16 (action head in float32, old log-probs
# recomputed in bf16); ARM sim1clock: sim_1group given the RL seconds of round s42's fp32 run on the same seed (round
# s41's protocol). Policy 5b3f184f, world model fd0a4c05; held-out 100 episodes.
set -eu
R=benchmarks/results/s43_bf16_update_fixed
S42=benchmarks/results/s42_bf16_update
S30=benchmarks/results/s30_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20"
for job in "$@"; do
  arm=${job%%:*} s=${job##*:}
  D=$R/${arm}_seed$s
  case $arm in
    bf16) A=wmrl_both; EXTRA="wmrl.updates=40 algo.precision=bf16";;
    sim1clock) A=sim_1group
      BUDGET=$($PY -c "import json,sys; print(round(json.load(open(sys.argv[1]))['wmrl_both']['rl_seconds'] / 60, 4))" $S42/fp32_seed$s/results.json)
      EXTRA="wmrl.updates=1000 wmrl.max_minutes=$BUDGET";;
    *) echo "unknown arm $arm (bf16, sim1clock)"; exit 2;;
  esac
  mkdir -p $D/runs
  echo "=== $arm seed $s start $(date -u +%H:%M:%S) $EXTRA"
  rm -rf $D/runs/$A $D/results.json
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s30
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S30/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms $A --out $D -- $COMMON $EXTRA seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_${arm}_seed$s.json
  echo "=== $arm seed $s done $(date -u +%H:%M:%S)"
done
