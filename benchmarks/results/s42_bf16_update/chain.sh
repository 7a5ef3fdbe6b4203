#!/usr/bin/env bash
# Record of the loop that runs round s42 in session 40 (not a general driver): PLAN.md's runs in order, each only if
# it starts by its limit (UTC); run.sh is the per-run driver.
cd /work/main
R=benchmarks/results/s42_bf16_update
now() { date -u +%H%M; }
for job in fp32:4 bf16:4 bf16:5 fp32:5 bf16:6 bf16:7; do
  if [ "$(now)" -le 1500 ]; then bash $R/run.sh $job; else echo "=== $job not started (past 15:00)"; fi
done
for job in sim1clock:4 sim1clock:5; do
  if [ "$(now)" -le 1515 ]; then bash $R/run.sh $job; else echo "=== $job not started (past 15:15)"; fi
done
echo "=== round done $(date -u +%H:%M:%S)"
