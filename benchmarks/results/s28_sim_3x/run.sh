#!/usr/bin/env bash
# Driver for round s28 (PLAN.md). From the repository root: bash benchmarks/results/s28_sim_3x/run.sh SEED...
# Per seed: simulator RL (8 real groups per update) to 3x the seed's WMRL RL seconds at update 20, held-out; then the
# same run resumed to 3x WMRL's RL seconds at update 40, held-out (100 episodes, seeds 300000+).
set -eu
R=benchmarks/results/s28_sim_3x
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=1000"
for s in "$@"; do
  W=benchmarks/results/s27_updates40/seed$s
  read M20 M40 < <($PY -c "
import json; r = json.load(open('$W/results.json'))['wmrl_both']
t20 = next(h['train_seconds'] for h in r['history'] if h['update'] == 20)
print(f'{3 * t20 / 60:.4f} {3 * r[\"rl_seconds\"] / 60:.4f}')")
  for phase in 3x20 3x40; do
    D=$R/seed${s}_$phase
    mkdir -p $D/runs
    # the base's held-out result is the same policy on the same seeds: reuse it
    $PY - "$W/heldout_eval.json" "$D/heldout_eval.json" <<'PYEOF'
import json, sys
from pathlib import Path
src, dst = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
out = json.loads(dst.read_text()) if dst.exists() else {}
for key, v in src.items():
    out.setdefault(key, {})["base"] = v["base"]
dst.write_text(json.dumps(out, indent=1))
PYEOF
  done
  echo "=== sim seed $s phase 3x20 (wmrl.max_minutes=$M20) start $(date -u +%H:%M:%S)"
  rm -rf $R/seed${s}_3x20/runs/sim
  $PY benchmarks/wmrl_vs_sim.py --arms sim --out $R/seed${s}_3x20 -- $COMMON wmrl.max_minutes=$M20 seed=$s
  $PY benchmarks/wmrl_seeds.py $R/seed${s}_3x20 --heldout-episodes 100 --out $R/heldout_seed${s}_3x20.json
  echo "=== sim seed $s phase 3x40 (wmrl.max_minutes=$M40) start $(date -u +%H:%M:%S)"
  rm -rf $R/seed${s}_3x40/runs/sim
  cp -r $R/seed${s}_3x20/runs/sim $R/seed${s}_3x40/runs/sim
  $PY benchmarks/wmrl_vs_sim.py --arms sim --out $R/seed${s}_3x40 -- $COMMON wmrl.max_minutes=$M40 resume=true seed=$s
  $PY benchmarks/wmrl_seeds.py $R/seed${s}_3x40 --heldout-episodes 100 --out $R/heldout_seed${s}_3x40.json
  echo "=== sim seed $s done $(date -u +%H:%M:%S)"
done
