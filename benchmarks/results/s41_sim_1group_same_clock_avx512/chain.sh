#!/usr/bin/env bash
# Record of the loop that ran round s41 in session 39 (not a general driver): it waited for `make test` to end,
# then ran PLAN.md's seeds with their start-time limits (UTC); run.sh is the per-run driver.
cd /work/main
while ! grep -q "rc=" /tmp/test.log; do sleep 5; done
R=benchmarks/results/s41_sim_1group_same_clock_avx512
now() { date -u +%H%M; }
if [ "$(now)" -le 1220 ]; then bash $R/run.sh 6; else echo "=== seed 6 not started (past 12:20)"; exit 0; fi
if [ "$(now)" -le 1233 ]; then bash $R/run.sh 7; else echo "=== seed 7 not started (past 12:33)"; fi
echo "=== round done $(date -u +%H:%M:%S)"
