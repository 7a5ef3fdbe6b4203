#!/usr/bin/env bash
# Driver for round s40 (PLAN.md). From the repository root: bash benchmarks/results/s40_sim_1group_full_wm/run.sh ARM:SEED...
# On the AVX-512 machine's builds (policy 5b3f184f, world model fd0a4c05 trained its full 10000 steps): simulator RL
# on WMRL's real groups (sim_1group, 42 updates) and default WMRL (wmrl_both, 40 updates); held-out 100 episodes.
# ARM is sim_1group or wmrl_both; a seed's arms share its directory (results.json keeps the arms already run).
set -eu
R=benchmarks/results/s40_sim_1group_full_wm
S30=benchmarks/results/s30_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20"
for job in "$@"; do
  arm=${job%%:*} s=${job##*:}
  case $arm in sim_1group) UPD=42;; wmrl_both) UPD=40;; *) echo "unknown arm $arm (sim_1group, wmrl_both)"; exit 2;; esac
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== $arm seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/$arm
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s30
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S30/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms $arm --out $D -- $COMMON wmrl.updates=$UPD seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== $arm seed $s done $(date -u +%H:%M:%S)"
done
