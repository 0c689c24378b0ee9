#!/usr/bin/env bash
# The live move's cut-over on a large store (issue 51): etcd 3.6 filled with KEYS values of
# VALUE_BYTES, its snapshot restored into a mem_etcd, `mem_etcd follow` started on the copy,
# then WRITES more puts at RATE a second to etcd; once they end, the time until `follow` has
# cut over (the idle window, then the check) is the pause a kube-apiserver would see before it
# could start on mem_etcd. Prints each step's time: fill, snapshot save, restore, mem_etcd's
# start, follow's first check, the lag while following and the cut-over.
#
# Usage: benches/follow_cutover.sh
# env: KEYS (1000000), VALUE_BYTES (1024): 1 GiB of values by default
#      WRITES (2000), RATE (200): the puts made while following
#      IDLE (2s): follow's --until-idle
#      DIR (/dev/shm/follow_cutover: both data directories and the snapshot; about 3x the
#      store's size), MEM_BIN (else this tree's release build), ETCD_BIN, BENCHMARK_BIN (else
#      built and cached by tests/peers/install_etcd.sh and install_benchmark.sh)
# Ports: 24379-24381 on 127.0.0.1 (etcd), 24479-24481 (mem_etcd, follow's /metrics).
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=${KEYS:-1000000}
VALUE_BYTES=${VALUE_BYTES:-1024}
WRITES=${WRITES:-2000}
RATE=${RATE:-200}
IDLE=${IDLE:-2s}
DIR=${DIR:-/dev/shm/follow_cutover}
ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
BENCHMARK_BIN=${BENCHMARK_BIN:-$(tests/peers/install_benchmark.sh | tail -1)}
if [ -z "${MEM_BIN:-}" ]; then cargo build --release --quiet; fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}

log() { echo "[follow_cutover $(date +%H:%M:%S)] $*" >&2; }
now() { date +%s%N; }
since() { echo "$((($(now) - $1) / 1000000)) ms"; }

PIDS=()
cleanup() {
  for p in ${PIDS[@]+"${PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
rm -rf "$DIR"
mkdir -p "$DIR"

# A member alone: KIND BIN DATA PORT (client PORT, peer PORT + 1).
member() {
  local u="http://127.0.0.1:$4" p="http://127.0.0.1:$(($4 + 1))"
  "$2" --name "$1" --data-dir "$3" --listen-client-urls "$u" --advertise-client-urls "$u" \
    --listen-peer-urls "$p" --initial-advertise-peer-urls "$p" --initial-cluster "$1=$p" \
    --quota-backend-bytes 8589934592 --log-level warn 2>"$DIR/$1.log" &
  PIDS+=($!)
  local end=$((SECONDS + 120))
  until "$ETCDCTL" --endpoints "$u" --dial-timeout 1s get health >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || { log "$1 did not start"; tail -5 "$DIR/$1.log" >&2; exit 1; }
    sleep 0.1
  done
}

t=$(now); member etcd "$ETCD_BIN" "$DIR/etcd" 24379
"$BENCHMARK_BIN" --endpoints 127.0.0.1:24379 --clients 50 --conns 10 put --key-size 32 \
  --val-size "$VALUE_BYTES" --total "$KEYS" --sequential-keys --key-space-size "$KEYS" \
  >"$DIR/fill.out" 2>&1
echo "etcd filled with $KEYS values of $VALUE_BYTES bytes: $(since "$t")"
t=$(now); "$ETCDCTL" --endpoints http://127.0.0.1:24379 snapshot save "$DIR/etcd.db" >/dev/null 2>&1
echo "etcdctl snapshot save: $(since "$t"), $(du -h "$DIR/etcd.db" | cut -f1)"
t=$(now); "$MEM" snapshot restore "$DIR/etcd.db" --data-dir "$DIR/mem" >"$DIR/restore.out" 2>&1
echo "mem_etcd snapshot restore: $(since "$t")"
t=$(now); member mem_etcd "$MEM" "$DIR/mem" 24479
echo "mem_etcd serving: $(since "$t"), RSS $(awk '/VmRSS/ {print int($2 / 1024) " MiB"}' "/proc/${PIDS[-1]}/status")"

t=$(now)
"$MEM" follow --source http://127.0.0.1:24379 --target http://127.0.0.1:24479 \
  --until-idle "$IDLE" --listen-metrics-urls http://127.0.0.1:24481 >"$DIR/follow.out" 2>&1 &
FOLLOW=$!
until grep -q '^following' "$DIR/follow.out"; do
  kill -0 "$FOLLOW" 2>/dev/null || { log "follow stopped"; cat "$DIR/follow.out" >&2; exit 1; }
  sleep 0.1
done
echo "follow's first check (HashKV of both): $(since "$t")"
"$BENCHMARK_BIN" --endpoints 127.0.0.1:24379 --clients 10 --conns 2 put --key-size 32 \
  --val-size "$VALUE_BYTES" --total "$WRITES" --rate "$RATE" --key-space-size "$KEYS" \
  >"$DIR/writes.out" 2>&1
t=$(now)
rc=0
wait "$FOLLOW" || rc=$?
echo "follow exited $rc, $(since "$t") after the last write (--until-idle $IDLE)"
grep -E '^(followed|HashKV|cut-over|differs)' "$DIR/follow.out" | tail -4
exit "$rc"
