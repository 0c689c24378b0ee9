#!/usr/bin/env bash
# Memory per key and per version: loads a fresh mem_etcd (data dir on /dev/shm) with Kubernetes
# Lease objects over gRPC and reads the server's RSS before and after, against issue 7's target
#   RSS(loaded) - RSS(empty) <= 1.5 x (key + value bytes of every retained version)
#                               + 100 B x (retained versions).
# Cases:
#   lease      KEYS Leases written once each (`--wal-mode none`);
#   lease-wal  the same with the default buffered WAL (the log is on /dev/shm, which is page
#              cache and not in the process's RSS: what is measured is the WAL's own memory);
#   history    HIST_KEYS Leases written ROUNDS times each, no compaction: every version stays.
# The load client is target/release/etcd-lease-flood in `--mode put --rounds N` (every key
# written exactly N times by 100 workers over 10 connections): keys
# `/registry/leases/kube-node-lease/node-NNNNNNN` (45 bytes), values a coordination.k8s.io/v1
# Lease in Kubernetes' protobuf encoding (about 362 bytes). Raw bytes are the key and value bytes
# it reports as written.
#
# Usage: benches/memory.sh
# env: KEYS (lease cases, default 1000000), HIST_KEYS (history case, default KEYS / 10; the full
#      1M keys x 10 versions takes about 10 minutes to load), ROUNDS (10), CASES ("lease lease-wal
#      history"), MAX_RSS_MIB (the load is stopped if the server grows past it, default 3/4 of
#      MemAvailable), MEM_ETCD_BIN and FLOOD_BIN (else cargo build --release).
# Quick check: KEYS=100000 benches/memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-1000000}
HIST_KEYS=${HIST_KEYS:-$((KEYS / 10))}
ROUNDS=${ROUNDS:-10}
CASES=${CASES:-lease lease-wal history}
MAX_RSS_MIB=${MAX_RSS_MIB:-$(awk '$1 == "MemAvailable:" {print int($2 / 1024 * 3 / 4)}' /proc/meminfo)}
if [ -z "${MEM_ETCD_BIN:-}" ] || [ -z "${FLOOD_BIN:-}" ]; then
  cargo build --release --quiet
fi
TMP=$(mktemp -d /dev/shm/memory.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT
# Private copies: a rebuild of target/ during the run cannot swap the binaries.
cp "${MEM_ETCD_BIN:-target/release/mem_etcd}" "$TMP/mem_etcd"
cp "${FLOOD_BIN:-target/release/etcd-lease-flood}" "$TMP/flood"

say() { echo "[memory $(date +%T)] $*" >&2; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; } # PID VmRSS|VmHWM
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Starts mem_etcd with ARGS on a fresh data dir and waits until it accepts connections.
start() {
  PORT=$(free_port)
  rm -rf "$TMP/data"
  "$TMP/mem_etcd" --data-dir "$TMP/data" --listen-client-urls "http://127.0.0.1:$PORT" \
    --log-level warn --quota-backend-bytes=-1 "$@" 2>"$TMP/server.log" &
  SERVER_PID=$!
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      sleep 0.5
      return
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.log" >&2; exit 1; }
    sleep 0.05
  done
  say "mem_etcd did not start"
  exit 1
}

stop() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || say "mem_etcd exited with status $?"
  if grep -qE 'ERROR|WARN|"level":"(warn|error)"' "$TMP/server.log"; then grep -E 'ERROR|WARN|"level":"(warn|error)"' "$TMP/server.log" | head >&2; fi
}

# Loads N keys ROUNDS times while a watchdog stops the load if the server passes MAX_RSS_MIB.
# Sets BYTES (key+value bytes written) and WRITES.
load() { # KEYS ROUNDS
  "$TMP/flood" --endpoints "127.0.0.1:$PORT" --mode put --clients 10 --workers 100 \
    --num-keys "$1" --rounds "$2" >"$TMP/flood.out" 2>"$TMP/flood.err" &
  local flood=$! aborted=0
  while kill -0 "$flood" 2>/dev/null; do
    if [ "$(status_kib "$SERVER_PID" VmRSS)" -gt $((MAX_RSS_MIB * 1024)) ]; then
      kill "$flood"
      aborted=1
      break
    fi
    sleep 0.2
  done
  wait "$flood" || true
  [ $aborted = 0 ] || { say "stopped: the server grew past MAX_RSS_MIB=$MAX_RSS_MIB"; ABORTED=1; }
  BYTES=$(awk '/^key\+value bytes written:/ {print $4}' "$TMP/flood.err")
  WRITES=$(awk '/ writes in / {print $1}' "$TMP/flood.out")
  local errors
  errors=$(grep -oE 'errors [0-9]+' "$TMP/flood.out" | grep -oE '[0-9]+' || echo "?")
  [ "$errors" = 0 ] || [ $aborted = 1 ] || { say "load errors: $errors"; cat "$TMP/flood.err" >&2; exit 1; }
  say "$(cat "$TMP/flood.out")"
}

ROWS=()
run_case() { # NAME KEYS ROUNDS SERVER_ARGS...
  local name=$1 keys=$2 rounds=$3
  shift 3
  ABORTED=0
  start "$@"
  local empty rss hwm
  empty=$(status_kib "$SERVER_PID" VmRSS)
  say "$name: $keys keys x $rounds, empty server RSS $((empty / 1024)) MiB"
  load "$keys" "$rounds"
  sleep 2 # let a WAL batch or snapshot in flight settle
  rss=$(status_kib "$SERVER_PID" VmRSS)
  hwm=$(status_kib "$SERVER_PID" VmHWM)
  stop
  local versions=$WRITES
  [ $ABORTED = 0 ] || name="$name (stopped)"
  ROWS+=("$(awk -v name="$name" -v k="$keys" -v v="$versions" -v raw="$BYTES" -v e="$empty" \
    -v r="$rss" -v h="$hwm" 'BEGIN {
      d = (r - e) * 1024; t = 1.5 * raw + 100 * v; mib = 1048576
      printf "%-17s %9d %10d %9.1f %9.1f %9.1f %9.1f %8.0f %8.0f %8.0f  %s",
        name, k, v, raw / mib, d / mib, (h - e) * 1024 / mib, t / mib, raw / v, d / v, t / v,
        (d <= t ? "met" : "NOT met")
    }')")
}

for c in $CASES; do
  case $c in
    lease) run_case lease "$KEYS" 1 --wal-mode none ;;
    lease-wal) run_case lease-wal "$KEYS" 1 --wal-mode buffered ;;
    history) run_case history "$HIST_KEYS" "$ROUNDS" --wal-mode none ;;
    *) say "unknown case $c"; exit 1 ;;
  esac
done

echo
printf '%-17s %9s %10s %9s %9s %9s %9s %8s %8s %8s  %s\n' case keys versions "raw MiB" "RSS MiB" \
  "HWM MiB" "tgt MiB" "raw/ver" "RSS/ver" "tgt/ver" target
for r in "${ROWS[@]}"; do echo "$r"; done
echo "(RSS and HWM: the server's VmRSS after the load and its peak, minus the empty server's"
echo " VmRSS; target: 1.5 x raw + 100 B per version; per-version columns in bytes; $(nproc) cores)"
