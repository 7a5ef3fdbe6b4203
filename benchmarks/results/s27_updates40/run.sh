#!/usr/bin/env bash
# Driver for round s27 (PLAN.md). From the repository root: bash benchmarks/results/s27_updates40/run.sh ARM SEED...
# ARM: wmrl_both | wm. Copies the seed's finished 20-update run of ARM (s25 seeds 0-5, s26 seeds 6-11), resumes it to
# 40 updates, then evaluates the 40-update policy held-out (100 episodes, seeds 300000+).
set -eu
R=benchmarks/results/s27_updates40
PY=.venv/bin/python
ARM=$1; shift
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20"
for s in "$@"; do
  if [ "$s" -le 5 ]; then SRC=benchmarks/results/s25_gap_z/seed$s; SRC_ARM=$ARM; [ "$ARM" = wmrl_both ] && SRC_ARM=wmrl_both_gapz
  else SRC=benchmarks/results/s26_more_seeds/seed$s; SRC_ARM=$ARM; fi
  mkdir -p $R/seed$s/runs
  rm -rf $R/seed$s/runs/$ARM
  cp -r $SRC/runs/$SRC_ARM $R/seed$s/runs/$ARM
  # the base's held-out result is the same policy on the same seeds: reuse it, evaluate only the new policy
  $PY - "$SRC/heldout_eval.json" "$R/seed$s/heldout_eval.json" <<'PYEOF'
import json, sys
from pathlib import Path
src, dst = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
out = json.loads(dst.read_text()) if dst.exists() else {}
for key, v in src.items():
    out.setdefault(key, {})["base"] = v["base"]
dst.write_text(json.dumps(out, indent=1))
PYEOF
  echo "=== $ARM seed $s start $(date -u +%H:%M:%S) from $SRC/runs/$SRC_ARM"
  $PY benchmarks/wmrl_vs_sim.py --arms $ARM --out $R/seed$s -- $COMMON wmrl.updates=40 resume=true seed=$s
  $PY benchmarks/wmrl_seeds.py $R/seed$s --heldout-episodes 100 --out $R/heldout_seed$s.json
  echo "=== $ARM seed $s done $(date -u +%H:%M:%S)"
done
