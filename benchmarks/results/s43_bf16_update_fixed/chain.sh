#!/usr/bin/env bash
# Record of the loop that runs round s43 in session 40 (not a general driver): PLAN.md's runs in order, each only if
# it starts by its limit (UTC); run.sh is the per-run driver.
cd /work/main
R=benchmarks/results/s43_bf16_update_fixed
now() { date -u +%H%M; }
for job in bf16:4 bf16:5 bf16:6 bf16:7; do
  if [ "$(now)" -le 1505 ]; then bash $R/run.sh $job; else echo "=== $job not started (past 15:05)"; fi
done
if [ "$(now)" -le 1512 ]; then bash $R/run.sh sim1clock:4; else echo "=== sim1clock:4 not started (past 15:12)"; fi
echo "=== round done $(date -u +%H:%M:%S)"
