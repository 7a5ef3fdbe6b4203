#!/usr/bin/env bash
# Driver for round s33 (PLAN.md). From the repository root: bash benchmarks/results/s33_zen3_single_corrections/run.sh SEED...
# Round s31's single-correction protocol on the models session 31's Zen 3 default run built (cache/): per seed, the
# arms debiasing only and denoising only (and both corrections, unless round s32 already ran it for that seed), 40
# updates each; all final policies and the base held-out (100 episodes, seeds 300000+).
set -eu
R=benchmarks/results/s33_zen3_single_corrections
S32=benchmarks/results/s32_zen3_same_clock
PY=.venv/bin/python
COMMON="sim=robosuite_lift policy_path=cache/sft-8134d734b9/pretrained_model world_model_path=cache/world_model-a00cd38dce/checkpoints/last wmrl.eval_every=0 wmrl.eval_episodes=20 wmrl.updates=40"
for s in "$@"; do
  D=$R/seed$s
  mkdir -p $D/runs
  echo "=== seed $s start $(date -u +%H:%M:%S)"
  rm -rf $D/runs/wmrl_debias $D/runs/wmrl_denoise
  ARMS="wmrl_debias wmrl_denoise"
  if [ -d $S32/seed$s/runs/wmrl_both ]; then
    # round s32's run of this seed: same machine kind, builds and overrides; its held-out evaluations reused
    ln -sfn "$(pwd)/$S32/seed$s/runs/wmrl_both" $D/runs/wmrl_both
    cp $S32/seed$s/heldout_eval.json $D/heldout_eval.json
    [ -f $D/results.json ] || $PY -c "import json,sys; r=json.load(open(sys.argv[1])); json.dump({'wmrl_both': r['wmrl_both']}, open(sys.argv[2], 'w'), indent=2)" $S32/seed$s/results.json $D/results.json
  else
    rm -rf $D/runs/wmrl_both $D/results.json
    ARMS="wmrl_both $ARMS"
    # the base's held-out result (same policy, same held-out seeds 300000+ for every run seed) from round s32
    [ -f $D/heldout_eval.json ] || $PY -c "import json,sys; c=json.load(open(sys.argv[1])); json.dump({k: {'base': v['base']} for k, v in c.items()}, open(sys.argv[2], 'w'), indent=1)" $S32/seed4/heldout_eval.json $D/heldout_eval.json
  fi
  $PY benchmarks/wmrl_vs_sim.py --arms $ARMS --out $D -- $COMMON seed=$s
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --paired wmrl_both wmrl_debias --out $R/heldout_seed$s.json
  $PY benchmarks/wmrl_seeds.py $D --heldout-episodes 100 --paired wmrl_both wmrl_denoise --out $R/heldout_seed${s}_denoise.json
  echo "=== seed $s done $(date -u +%H:%M:%S)"
done
