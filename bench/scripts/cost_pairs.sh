#!/usr/bin/env bash
# The cost pairs of issues 27 and 28, on a quiet machine, alternated (A B A B):
#  - the router: before it (a worktree at REV_BEFORE) and now, full-store at c=1000, seed mock;
#  - tracing: off (full-store) and on (full-store-traced, every turn sampled, exporting to
#    bench/scripts/otlp_sink.py on 127.0.0.1:4318), in the same sweep.
# Usage: bench/scripts/cost_pairs.sh WORKTREE_BEFORE MACHINE_NAME
set -euo pipefail
BEFORE="$1"; NAME="$2"; HERE="$(cd "$(dirname "$0")/../.." && pwd)"
SEED=(--sweep 1000 --duration-secs 30 --warmup-secs 5 --mock-ttft-ms 2000 --mock-tps 200 --mock-tokens 8)
"$HERE/.venv/bin/python" "$HERE/bench/scripts/otlp_sink.py" --port 4318 & SINK=$!
trap 'kill $SINK' EXIT
for round in 1 2; do
  (cd "$BEFORE" && .venv/bin/agentos bench sweep --profile full-store "${SEED[@]}" \
     --name "$NAME-router-before-r$round" --out-dir "$HERE/bench/results")
  (cd "$HERE" && .venv/bin/agentos bench sweep --profile full-store "${SEED[@]}" \
     --name "$NAME-router-after-r$round" --out-dir "$HERE/bench/results")
  (cd "$HERE" && .venv/bin/agentos bench sweep --profile full-store,bench/profiles/full-store-traced.toml \
     "${SEED[@]}" --name "$NAME-tracing-r$round" --out-dir "$HERE/bench/results")
done
curl -s 127.0.0.1:4318/stats; echo
