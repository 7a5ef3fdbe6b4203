#!/usr/bin/env bash
# Record of the loop that runs round s45 in session 42 (not a general driver): PLAN.md's runs in order, each only if
# it starts by 21:05 UTC; run.sh is the per-run driver. Run from a worktree of the plan's commit (code frozen).
R=benchmarks/results/s45_rank_check
now() { date -u +%H%M; }
for run in "20k 4" "10k 4" "20k 6" "10k 6" "20k 5" "10k 5" "20k 7" "10k 7"; do
  if [ "$(now)" -le 2105 ]; then bash $R/run.sh $run; else echo "=== $run not started (past 21:05)"; fi
done
echo "=== round done $(date -u +%H:%M:%S)"
