#!/usr/bin/env bash
# Record of the loop that runs round s44 in session 41 (not a general driver): waits for the world model, then
# PLAN.md's runs in order, each only if it starts by its limit (UTC); run.sh is the per-run driver.
cd /work/main
R=benchmarks/results/s44_wm_20k_steps
now() { date -u +%H%M; }
until [ -f cache/world_model-65ffe78e0b/DONE ] && ! pgrep -f "pipeline.wm_steps=20000" > /dev/null; do sleep 30; done
echo "=== world model done $(date -u +%H:%M:%S)"
for s in 4 5 6 7; do
  if [ "$(now)" -le 1810 ]; then bash $R/run.sh $s; else echo "=== seed $s not started (past 18:10)"; fi
done
echo "=== round done $(date -u +%H:%M:%S)"
