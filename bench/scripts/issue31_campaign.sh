#!/usr/bin/env bash
# Issue 31's measurements in one quiet sitting, one after another (nothing else may run):
#  1. one node, SQLite store, 1..4000 concurrent turns (seed mock), the direct mock in the same run;
#  2. the cluster path at 1000: 1, 2 and 3 nodes on PostgreSQL + Redis;
#  3. one host's cores: --workers 1 and 2, the server pinned apart from the mock and the generator;
#  4. the runs bench: 100 runs started at once (the start call's latency, the sandbox's commands);
#  5. flame graphs (py-spy, SVG and collapsed stacks) of one node at 1000 turns, SQLite and
#     PostgreSQL + Redis.
# Usage: bench/scripts/issue31_campaign.sh MACHINE_NAME [STEP...]   (steps: sweep nodes workers runs flame)
set -euo pipefail
NAME="$1"; shift
STEPS="${*:-sweep nodes workers runs flame}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$HERE"
BIN="$HERE/.venv/bin"
OUT="$HERE/bench/results"
SEED=(--mock-ttft-ms 2000 --mock-tps 200 --mock-tokens 8)
PROFILES="$HERE/src/agentos_bench/profiles"

step() { [[ " $STEPS " == *" $1 "* ]]; }

if step sweep; then
  "$BIN/agentos" bench sweep --profile full-store "${SEED[@]}" \
    --sweep 1,2,4,8,16,32,64,128,256,512,1000,2000,3000,4000 --duration-secs 12 --warmup-secs 3 \
    --name "$NAME-1-4000" --out-dir "$OUT"
fi

if step nodes; then
  for n in 1 2 3; do
    "$BIN/agentos" bench sweep --profile postgres-3node --nodes "$n" "${SEED[@]}" --sweep 1000 \
      --duration-secs 12 --warmup-secs 3 --name "$NAME-pg-${n}node" --out-dir "$OUT"
  done
fi

if step workers; then
  # 1 worker on core 0; 2 workers on core 0 (what a second process costs on the same core);
  # 2 workers on both cores (the mock and the generator on core 1 in every case).
  "$BIN/agentos" bench sweep --profile postgres-3node --workers 1 --server-cpus 0 --mock-cpus 1 \
    --loadgen-cpus 1 "${SEED[@]}" --sweep 256,1000 --duration-secs 12 --warmup-secs 3 \
    --name "$NAME-w1-cpu0" --out-dir "$OUT"
  "$BIN/agentos" bench sweep --profile postgres-3node --workers 2 --server-cpus 0 --mock-cpus 1 \
    --loadgen-cpus 1 "${SEED[@]}" --sweep 256,1000 --duration-secs 12 --warmup-secs 3 \
    --name "$NAME-w2-cpu0" --out-dir "$OUT" --target server
  "$BIN/agentos" bench sweep --profile postgres-3node --workers 2 --server-cpus 0-1 --mock-cpus 1 \
    --loadgen-cpus 1 "${SEED[@]}" --sweep 256,1000 --duration-secs 12 --warmup-secs 3 \
    --name "$NAME-w2-cpu01" --out-dir "$OUT" --target server
fi

if step runs; then
  "$BIN/agentos" bench runs --runs 100 --name "$NAME" --out-dir "$OUT"
fi

flame() {  # flame LABEL CONFIG [ENV...]: a sweep at 1000 against the server, py-spy attached meanwhile
  local label="$1" config="$2"; shift 2
  local stamp data mock_pid server_pid spy spy_pid
  stamp="$(date -u +%Y-%m-%dT%H%M%SZ)"
  data="$(mktemp -d)"
  "$BIN/agentos" mock-llm --ttft-ms 2000 --tps 200 --tokens 8 --port 4020 >"$data/mock.log" 2>&1 &
  mock_pid=$!
  env "$@" "$BIN/python" -m agentos serve --config "$config" --host 127.0.0.1 --port 4021 \
    --provider-url http://127.0.0.1:4020/v1 --data-dir "$data/server" >"$data/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf http://127.0.0.1:4021/healthz >/dev/null && break
    sleep 0.2
  done
  # Attached once the server listens (its start-up imports stay out of the profile), for the
  # sweep's warm-up and window: an SVG flame graph and the collapsed stacks (`-f raw`, read by
  # bench/scripts/collapsed_top.py), one recording each, in turn.
  for format in flamegraph raw; do
    spy="$OUT/$stamp-$NAME-flame-$label-c1000.$([[ $format == raw ]] && echo txt || echo svg)"
    "$BIN/py-spy" record --nonblocking -r 100 --pid "$server_pid" --duration 22 -f "$format" -o "$spy" &
    spy_pid=$!
    "$BIN/agentos" bench sweep --target server --server-url http://127.0.0.1:4021 \
      --server-pid "$server_pid" --mock-url http://127.0.0.1:4020/v1 --mock-pid "$mock_pid" \
      --sweep 1000 --duration-secs 20 --warmup-secs 3 --name "$NAME-under-pyspy-$label-$format" --out-dir "$OUT"
    wait "$spy_pid" || true
    echo "profile: $spy"
  done
  kill -INT "$server_pid"; wait "$server_pid" || true
  kill "$mock_pid"; wait "$mock_pid" || true
  rm -rf "$data"
}

if step flame; then
  flame sqlite "$PROFILES/full-store.toml"
  schema="agentos_bench_flame_$RANDOM"
  flame postgres "$PROFILES/postgres-3node.toml" AGENTOS_STORE_POSTGRES_SCHEMA="$schema" \
    AGENTOS_COORDINATION_KEY_PREFIX="agentos:bench:flame$RANDOM:"
  psql -h 127.0.0.1 -U postgres -d test -qc "DROP SCHEMA IF EXISTS $schema CASCADE"
fi
