#!/usr/bin/env bash
# Session 17's cluster-path pair: the tree before (a worktree, e.g. at b01c8ab: every turn start
# published its epoch) and now (a turn publishes only when it fenced out a running one; a turn
# that ends with no answer lets go of its session), 3 nodes on PostgreSQL + Redis at 1000,
# seed mock, alternated A B A B on a quiet machine. The before side runs the worktree's code
# through PYTHONPATH with this venv (its dependencies are the same).
# Usage: bench/scripts/epoch_pairs.sh WORKTREE_BEFORE MACHINE_NAME [ORDER]
# ORDER: "ab" (before first, rounds 1-2, the default) or "ba" (after first, rounds 3-4): both,
# so a drift over the sitting is not read as a difference.
set -euo pipefail
BEFORE="$1"; NAME="$2"; ORDER="${3:-ab}"; HERE="$(cd "$(dirname "$0")/../.." && pwd)"; BIN="$HERE/.venv/bin"
ARGS=(--profile postgres-3node --nodes 3 --mock-ttft-ms 2000 --mock-tps 200 --mock-tokens 8
      --sweep 1000 --duration-secs 12 --warmup-secs 3 --out-dir "$HERE/bench/results")
before() { (cd /tmp && PYTHONPATH="$BEFORE/src" "$BIN/agentos" bench sweep "${ARGS[@]}" --name "$NAME-epoch-before-r$1"); }
after() { (cd /tmp && PYTHONPATH="$HERE/src" "$BIN/agentos" bench sweep "${ARGS[@]}" --name "$NAME-epoch-after-r$1"); }
if [ "$ORDER" = ab ]; then
  for round in 1 2; do before "$round"; after "$round"; done
else
  for round in 3 4; do after "$round"; before "$round"; done
fi
