#!/usr/bin/env bash
# Driver for round s30 (PLAN.md). From the repository root: bash benchmarks/results/s30_same_clock/run.sh SEED...
# Per seed, on this machine, one after the other: WMRL (wmrl_both, 40 updates), then simulator RL (8 real groups per
# update) given 3x the RL seconds WMRL just took; both final policies held-out (100 episodes, seeds 300000+).
set -eu
R=benchmarks/results/s30_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache_s29/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  # the base's held-out result is the same policy (sha1 5b3f184f) on the same seeds: reuse round s27's
  $PY - benchmarks/results/s27_updates40/seed$s/heldout_eval.json $D/heldout_eval.json <<'PYEOF'
import json, sys
from pathlib import Path
src, dst = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
out = json.loads(dst.read_text()) if dst.exists() else {}
for key, v in src.items():
    out.setdefault(key, {})["base"] = v["base"]
dst.write_text(json.dumps(out, indent=1))
PYEOF
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_both $D/runs/sim $D/results.json
  $PY benchmarks/wmrl_vs_sim.py --arms wmrl_both sim --budget-from wmrl_both --budget-fraction 3 --out $D -- \
    $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --paired wmrl_both sim --out $R/heldout_seed$s.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
