#!/usr/bin/env bash
# A cluster member's memory against a member alone's: loads a fresh mem_etcd member alone, then
# a fresh 3-member cluster, with N 1 KiB puts each (etcd's `benchmark put`, 100 clients over
# 10 connections, distinct keys), and prints every server's RSS two seconds after the load.
#
# Usage: N=100000 benches/member_memory.sh
# env: N (puts, default 100000), MEM_BIN (default: this tree's release build), MEM_ARGS (extra
#      mem_etcd flags, e.g. "--snapshot-count 1000"), ETCD_BIN, BENCHMARK_BIN (else built or
#      cached by tests/peers/*.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
BENCH=${BENCHMARK_BIN:-$(tests/peers/install_benchmark.sh | tail -1)}
if [ -z "${MEM_BIN:-}" ]; then cargo build --release --quiet; fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
TMP=$(mktemp -d /dev/shm/member_memory.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=25791

run() { # MEMBERS
  local n=$1 i initial='' endpoints='' pids=()
  for i in $(seq 0 $((n - 1))); do
    initial+="m$i=http://127.0.0.1:$((PORT + 2 * i + 1)),"
    endpoints+="127.0.0.1:$((PORT + 2 * i)),"
  done
  for i in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086
    "$MEM" --name "m$i" --data-dir "$TMP/$n-m$i" \
      --listen-client-urls "http://127.0.0.1:$((PORT + 2 * i))" \
      --advertise-client-urls "http://127.0.0.1:$((PORT + 2 * i))" \
      --listen-peer-urls "http://127.0.0.1:$((PORT + 2 * i + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 2 * i + 1))" \
      --initial-cluster "${initial%,}" --initial-cluster-token "memory-$$" \
      --initial-cluster-state new --quota-backend-bytes 8589934592 --log-level warn \
      ${MEM_ARGS:-} 2>"$TMP/$n-m$i.log" &
    pids+=($!)
  done
  endpoints=${endpoints%,}
  for _ in $(seq 150); do
    "$ETCDCTL" --endpoints "$endpoints" endpoint health >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$BENCH" --endpoints "$endpoints" --conns 10 --clients 100 put --key-size 8 --sequential-keys \
    --key-space-size "$N" --total "$N" --val-size 1024 2>&1 | grep 'Requests/sec' || true
  sleep 2
  for i in "${!pids[@]}"; do
    echo "members=$n m$i rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/${pids[$i]}/status")"
  done
  kill "${pids[@]}"
  wait "${pids[@]}" 2>/dev/null || true
}

run 1
run 3
