#!/usr/bin/env bash
# The pairs of issues 28, 29 and 30 on a 2-core VM, at a concurrency the VM carries (256) and at
# the issues' 1000 (CPU-bound on a slow VM), each against the direct mock of the same sweep:
#  - tracing off vs on (every turn sampled, OTLP to bench/scripts/otlp_sink.py), two rounds;
#  - plain turns vs enqueue pairs (--double-text enqueue);
#  - a tenant key vs an end user's JWT (bench/scripts/bench_idp.py).
# Usage: bench/scripts/property_pairs.sh MACHINE_NAME   (run from the repository, nothing else running)
set -euo pipefail
NAME="$1"; HERE="$(cd "$(dirname "$0")/../.." && pwd)"; cd "$HERE"
SEED=(--sweep 256,1000 --duration-secs 20 --warmup-secs 5 --mock-ttft-ms 2000 --mock-tps 200 --mock-tokens 8)
OUT=(--out-dir "$HERE/bench/results")
.venv/bin/python bench/scripts/otlp_sink.py --port 4318 & SINK=$!
.venv/bin/python bench/scripts/bench_idp.py --port 4319 & IDP=$!
trap 'kill $SINK $IDP' EXIT
for round in 1 2; do
  .venv/bin/agentos bench sweep --profile full-store,bench/profiles/full-store-traced.toml "${SEED[@]}" \
    --name "$NAME-tracing-r$round" "${OUT[@]}"
done
.venv/bin/agentos bench sweep --profile full-store "${SEED[@]}" --name "$NAME-plain" "${OUT[@]}"
.venv/bin/agentos bench sweep --profile full-store --double-text enqueue "${SEED[@]}" --name "$NAME-enqueue" "${OUT[@]}"
.venv/bin/agentos bench sweep --profile full-store --tenants 1 "${SEED[@]}" --name "$NAME-key" "${OUT[@]}"
.venv/bin/agentos bench sweep --profile bench/profiles/full-store-jwt.toml --tenants 1 \
  --idp-url http://127.0.0.1:4319 "${SEED[@]}" --name "$NAME-jwt" "${OUT[@]}"
curl -s 127.0.0.1:4318/stats; echo
