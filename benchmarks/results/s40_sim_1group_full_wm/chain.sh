#!/usr/bin/env bash
# Record of the loop that ran round s40 in session 39 (not a general driver): it waited for `make train` to end,
# then ran PLAN.md's order with its start-time limits (UTC); run.sh is the per-run driver.
cd /work/main
while [ ! -f /tmp/train.end ]; do sleep 10; done
R=benchmarks/results/s40_sim_1group_full_wm
now() { date -u +%H%M; }
bash $R/run.sh sim_1group:4 sim_1group:5
for s in 6 7 8; do
  [ "$(now)" -le 1202 ] || { echo "=== wmrl_both:$s not started (past 12:02)"; break; }
  bash $R/run.sh wmrl_both:$s || break
  [ "$(now)" -le 1222 ] || { echo "=== sim_1group:$s not started (past 12:22)"; break; }
  bash $R/run.sh sim_1group:$s || break
done
echo "=== round done $(date -u +%H:%M:%S)"
