#!/usr/bin/env bash
# Driver for round s45 (PLAN.md). From the repository root: bash benchmarks/results/s45_rank_check/run.sh WM SEED...
# WM: 10k (cache/world_model-a00cd38dce, the default's) or 20k (cache/world_model-65ffe78e0b, round s44's).
# Default WMRL (wmrl_both, 40 updates) from policy 5b3f184f plus the imagination ranking check
# (wmrl.check_replay=true correction.rank_floor=0.3); held-out 100 episodes.
set -eu
R=benchmarks/results/s45_rank_check
S30=benchmarks/results/s30_same_clock
PY=$PWD/.venv/bin/python
export PYTHONPATH=$PWD  # this checkout's code, not the editable install's (the round runs from a worktree)
WM=$1; shift
case $WM in
  10k) WMPATH=cache/world_model-a00cd38dce/checkpoints/last ;;
  20k) WMPATH=cache/world_model-65ffe78e0b/checkpoints/last ;;
  *) echo "WM must be 10k or 20k, got $WM" >&2; exit 2 ;;
esac
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=$WMPATH wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40 wmrl.check_replay=true correction.rank_floor=0.3"
(cd /tmp && $PY -c "import vla_wmrl, world_models; print('=== code from', vla_wmrl.__file__, world_models.__file__)")
for s in "$@"; do
  D=$R/rank_wm${WM}_seed$s
  mkdir -p $D/runs
  echo "=== rank wm$WM seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/results.json
  # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s30
  [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S30/seed4/heldout_eval.json $D/heldout_eval.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --out $R/heldout_wm${WM}_seed$s.json
  echo "=== rank wm$WM seed $s done $(date -u +%H:%M:%S)"
done
