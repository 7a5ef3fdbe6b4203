#!/usr/bin/env bash
# Round s41's fourth seed (PLAN.md addendum): sim_1group on seed 5 given round s30's WMRL RL seconds on seed 5 (755 s)
# scaled by today's/s30's seed-4 time (787/776): 766 s = 12.77 min. Held-out 100 episodes.
set -eu
R=benchmarks/results/s43_bf16_update_fixed
D=$R/sim1clock_seed5
PY=.venv/bin/python
mkdir -p $D/runs
echo "=== sim1clock seed 5 start $(date -u +%H:%M:%S)"
rm -rf $D/runs/sim_1group $D/results.json
[ -f $D/heldout_eval.json ] || cp $R/sim1clock_seed4/heldout_eval.json /tmp/base.json && $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items() if 'base' in v}, open(sys.argv[2], 'w'), indent=1)" benchmarks/results/s30_same_clock/seed4/heldout_eval.json $D/heldout_eval.json
$PY benchmarks/wmrl_vs_sim.py --arms sim_1group --out $D -- sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=1000 wmrl.max_minutes=12.77 seed=5
$PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_sim1clock_seed5.json
echo "=== sim1clock seed 5 done $(date -u +%H:%M:%S)"
