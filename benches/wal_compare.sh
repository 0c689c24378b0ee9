#!/usr/bin/env bash
# What the write-ahead log costs, on a real disk (not tmpfs: fsync matters), in one run:
#  1. put load: etcd's own `benchmark put` against mem_etcd (--wal-mode none as a baseline,
#     buffered, --fsync) and a real etcd 3.6 (fsync per raft batch), each on a fresh data dir:
#     requests/s, server CPU per request, and the WAL's group commit (revisions per batch and
#     per fsync, from the `wal: closed` line; for etcd from its /metrics).
#  2. restart: KEYS keys of 1 KiB loaded into mem_etcd, restarted from the WAL alone, then again
#     after a snapshot: time until it serves, the recovery's own `seconds=`, RSS, key count.
#  3. disk use: KEYS2 keys written REWRITES times each; the data dir's size before and after
#     a compaction and the snapshot it triggers.
#
# Usage: benches/wal_compare.sh
# env: DATA_ROOT (where data dirs go, default /var/tmp), TOTAL (put requests per server, 100000),
#      KEYS (restart test, 1000000), KEYS2 (disk test, 100000), REWRITES (10),
#      CLIENTS (100), CONNS (10), PORT (23795; etcd also uses PORT+1),
#      PUT_MODES (mem_etcd WAL modes for the put test, default "none buffered fsync"),
#      MEM_ETCD_BIN (else cargo build --release), ETCD_BIN, ETCDCTL_BIN, BENCHMARK_BIN
#      (else built/cached by tests/peers/*.sh). Quick check: TOTAL=20000 KEYS=100000 KEYS2=20000
# Logs and benchmark outputs are copied to /tmp/wal_compare-*.
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-100000}
KEYS=${KEYS:-1000000}
KEYS2=${KEYS2:-100000}
REWRITES=${REWRITES:-10}
CLIENTS=${CLIENTS:-100}
CONNS=${CONNS:-10}
PORT=${PORT:-23795}
DATA_ROOT=${DATA_ROOT:-/var/tmp}
PUT_MODES=${PUT_MODES:-none buffered fsync}
if [ -z "${ETCD_BIN:-}" ]; then ETCD_BIN=$(tests/peers/install_etcd.sh | tail -1)/etcd; fi
ETCDCTL_BIN=${ETCDCTL_BIN:-$(dirname "$ETCD_BIN")/etcdctl}
BENCH=${BENCHMARK_BIN:-$(tests/peers/install_benchmark.sh | tail -1)}
if [ -z "${MEM_ETCD_BIN:-}" ]; then
  cargo build --release --quiet
  MEM_ETCD_BIN=target/release/mem_etcd
fi
TMP=$(mktemp -d "$DATA_ROOT/wal_compare.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; cp "$TMP"/*.log "$TMP"/*.out /tmp/ 2>/dev/null || true; rm -rf "$TMP"' EXIT
# A private copy, so that a rebuild of target/ during the run cannot swap the binary between
# a load and the restart that recovers it.
MEM=$TMP/mem_etcd
cp "$MEM_ETCD_BIN" "$MEM"
MEM_LOG_LEVEL=warn,mem_etcd::wal=info,mem_etcd::wal::recover=info,mem_etcd::server=info
HUGE=1152921504606846976 # --wal-snapshot-bytes that never triggers
MIB=1048576
START_TIMEOUT=${START_TIMEOUT:-900} # seconds a restart may take

say() { echo "[wal_compare $(date +%T)] $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctl() { "$ETCDCTL_BIN" --endpoints "127.0.0.1:$PORT" --command-timeout 120s "$@"; }
field() { awk -v n="\"$1\"" '$1 == n {print $3; exit}'; } # NAME, from `etcdctl -w fields`
key_count() { ctl get "" --from-key --count-only -w fields | field Count; }
cur_rev() { ctl endpoint status -w fields | field Revision; }
db_size() { ctl endpoint status -w fields | field DBSize; }
du_b() { du -sb "$1" | cut -f1; }
mib() { awk -v b="$1" 'BEGIN{printf "%.1f", b / 1048576}'; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a - b}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
log_time() { date -d "$1" +%s.%N; } # a log line's RFC 3339 timestamp as epoch seconds
kv() { grep -m1 -oE "$1=\"?[0-9.]+" <<<"$2" | grep -oE '[0-9.]+$' || echo -; } # KEY LINE
msg() { sed 's/.*INFO [^ ]* //' <<<"$1"; } # a log line without timestamp, level, target
rss_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; } # PID VmRSS|VmHWM

# Starts mem_etcd on data dir DIR and waits until it logs that it serves. Sets SERVER_PID,
# MEM_LOG, T_LAUNCH (epoch seconds before the fork), T_TCP (seconds until a TCP connect
# succeeded), T_READY (seconds until the `ready to serve` line's timestamp).
start_mem() { # NAME DIR ARGS...
  local name=$1 dir=$2
  shift 2
  MEM_LOG=$TMP/wal_compare-$name.log
  : >"$MEM_LOG"
  T_LAUNCH=$(date +%s.%N)
  "$MEM" --data-dir "$dir" --listen-client-urls "http://127.0.0.1:$PORT" --log-level "$MEM_LOG_LEVEL" --log-format console --quota-backend-bytes 8589934592 \
    "$@" 2>"$MEM_LOG" &
  SERVER_PID=$!
  T_TCP=-
  local deadline=$((SECONDS + START_TIMEOUT)) line
  while :; do
    if [ "$T_TCP" = - ] && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      T_TCP=$(sub "$(date +%s.%N)" "$T_LAUNCH")
    fi
    line=$(grep -m1 'ready to serve client requests' "$MEM_LOG" || true)
    [ -n "$line" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$MEM_LOG" >&2; fail "mem_etcd ($name) exited while starting"; }
    [ $SECONDS -lt $deadline ] || { tail -20 "$MEM_LOG" >&2; fail "mem_etcd ($name) not ready in ${START_TIMEOUT}s"; }
    sleep 0.01
  done
  T_READY=$(sub "$(log_time "${line%% *}")" "$T_LAUNCH")
}

# SIGTERM, wait, and read the `wal: closed` line into CLOSED (empty without a WAL).
stop_mem() {
  local rc=0
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || rc=$?
  [ $rc -eq 0 ] || { tail -20 "$MEM_LOG" >&2; fail "mem_etcd exited with status $rc after SIGTERM (log $MEM_LOG)"; }
  CLOSED=$(grep -m1 'wal: closed' "$MEM_LOG" || true)
  if grep -qE ' (ERROR|WARN) ' "$MEM_LOG"; then
    say "warnings/errors in $(basename "$MEM_LOG"):"
    grep -E ' (ERROR|WARN) ' "$MEM_LOG" | head -20 >&2
  fi
}

start_etcd() { # DIR
  "$ETCD_BIN" --name b --data-dir "$1" --listen-client-urls "http://127.0.0.1:$PORT" \
    --advertise-client-urls "http://127.0.0.1:$PORT" --listen-peer-urls "http://127.0.0.1:$((PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 1))" --initial-cluster "b=http://127.0.0.1:$((PORT + 1))" \
    --quota-backend-bytes 8589934592 --log-level warn 2>"$TMP/wal_compare-etcd.log" &
  SERVER_PID=$!
  for _ in $(seq 200); do
    "$ETCDCTL_BIN" --endpoints "127.0.0.1:$PORT" --dial-timeout 1s --command-timeout 1s endpoint health \
      >/dev/null 2>&1 && return
    sleep 0.1
  done
  fail "etcd did not start"
}

etcd_metric() { # NAME: a counter from etcd's /metrics
  curl -fsS "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 == n {v = $2} END {printf "%d", v}'
}

# Runs `benchmark` with ARGS against the server; sets RPS, CPU (server µs per request), BENCH_S.
bench() { # NAME REQUESTS ARGS...
  local name=$1 n=$2 out t0 t1 c0 c1
  shift 2
  c0=$(cpu_ticks "$SERVER_PID"); t0=$(date +%s.%N)
  out=$("$BENCH" --endpoints "127.0.0.1:$PORT" --clients "$CLIENTS" --conns "$CONNS" "$@" 2>&1) ||
    { echo "$out" | tail -20 >&2; fail "benchmark $name"; }
  t1=$(date +%s.%N); c1=$(cpu_ticks "$SERVER_PID")
  echo "$out" >"$TMP/wal_compare-$name.out"
  RPS=$(grep -m1 -oE 'Requests/sec:\s*[0-9.]+' <<<"$out" | grep -oE '[0-9.]+$' || echo 0)
  CPU=$(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}')
  BENCH_S=$(sub "$t1" "$t0")
  if grep -q 'error' <<<"$out"; then
    say "benchmark $name reported errors:"; grep -m5 'error' <<<"$out" >&2
  fi
}

# Waits up to SECS for a `snapshot written` line with revision >= REV in the current log (and
# as long as DIR/snap holds a snapshot being written, `<rev>.tmp`, up to START_TIMEOUT).
wait_snapshot() { # DIR REV SECS
  local deadline=$((SECONDS + $3)) hard=$((SECONDS + START_TIMEOUT)) r
  while [ $SECONDS -lt $deadline ] || { compgen -G "$1/snap/*.tmp" >/dev/null && [ $SECONDS -lt $hard ]; }; do
    for r in $(grep 'wal: snapshot written' "$MEM_LOG" | grep -oE 'revision=[0-9]+' | cut -d= -f2); do
      [ "$r" -ge "$2" ] && return 0
    done
    sleep 0.2
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
say "data under $TMP ($(stat -f -c %T "$TMP"))"
[ "$(stat -f -c %T "$TMP")" != tmpfs ] || say "WARNING: $DATA_ROOT is tmpfs; fsync costs nothing there"
# Disk probe: 4 KiB appends with O_DSYNC (one fdatasync-equivalent each).
DSYNC=$(dd if=/dev/zero of="$TMP/dsync.probe" bs=4096 count=200 oflag=dsync 2>&1 | tail -1 |
  awk '{for (i = 1; i <= NF; i++) if ($i == "s,") print $(i - 1)}')
DSYNC_MS=$(awk -v s="${DSYNC:-0}" 'BEGIN{printf "%.2f", s / 200 * 1000}')
rm -f "$TMP/dsync.probe"

# 1. put load -----------------------------------------------------------------------------------
PUT=(put --key-size 48 --val-size 1024 --key-space-size 100000 --sequential-keys=false --total "$TOTAL")
declare -A P_RPS P_CPU P_BATCH P_REVS P_FSYNC P_BYTES
for mode in $PUT_MODES; do
  case $mode in
    fsync) flags=(--fsync) ;;
    *) flags=(--wal-mode "$mode") ;;
  esac
  say "put: mem_etcd ${flags[*]}, $TOTAL requests"
  start_mem "put-$mode" "$TMP/put-$mode" "${flags[@]}"
  bench "put-mem_etcd-$mode" "$TOTAL" "${PUT[@]}"
  stop_mem
  P_RPS[$mode]=$RPS P_CPU[$mode]=$CPU
  P_BATCH[$mode]=$(kv batches "$CLOSED") P_REVS[$mode]=$(kv revisions "$CLOSED")
  P_FSYNC[$mode]=$(kv fsyncs "$CLOSED") P_BYTES[$mode]=$(kv bytes "$CLOSED")
  [ -z "$CLOSED" ] || say "  $RPS req/s; $(msg "$CLOSED")"
  rm -rf "$TMP/put-$mode"
done
say "put: etcd $("$ETCD_BIN" --version | head -1 | awk '{print $3}'), $TOTAL requests"
start_etcd "$TMP/etcd"
F0=$(etcd_metric etcd_disk_wal_fsync_duration_seconds_count)
bench put-etcd "$TOTAL" "${PUT[@]}"
F1=$(etcd_metric etcd_disk_wal_fsync_duration_seconds_count)
E_RPS=$RPS E_CPU=$CPU E_FSYNC=$((F1 - F0))
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
rm -rf "$TMP/etcd"
say "  $E_RPS req/s; $E_FSYNC WAL fsyncs"

# 2. restart ------------------------------------------------------------------------------------
declare -A R_TCP R_READY R_FIRST R_SECS R_RECORDS R_RSS R_HWM R_COUNT R_DU R_NOTE
LOAD=(put --key-size 48 --val-size 1024 --key-space-size "$KEYS" --sequential-keys)
D2=$TMP/restart
# Restarts on D2 and records the figures under CASE.
restart_case() { # CASE ARGS...
  local c=$1
  shift
  start_mem "restart-$c" "$D2" "$@"
  R_COUNT[$c]=$(key_count)
  R_FIRST[$c]=$(sub "$(date +%s.%N)" "$T_LAUNCH")
  R_TCP[$c]=$T_TCP R_READY[$c]=$T_READY
  R_SECS[$c]=$(kv seconds "$(grep -m1 'wal: recovered' "$MEM_LOG")")
  R_RECORDS[$c]=$(kv records "$(grep -m1 'wal: recovered' "$MEM_LOG")")
  R_RSS[$c]=$(rss_kib "$SERVER_PID" VmRSS) R_HWM[$c]=$(rss_kib "$SERVER_PID" VmHWM)
  say "  restart ($c): tcp ${T_TCP}s, ready ${T_READY}s, recovery ${R_SECS[$c]}s, $(msg "$(grep -m1 'wal: recovered' "$MEM_LOG")")"
  [ "${R_COUNT[$c]}" = "$KEYS" ] || say "  WRONG KEY COUNT after restart ($c): ${R_COUNT[$c]}, expected $KEYS"
  stop_mem
}
say "restart: loading $KEYS keys (no snapshots)"
start_mem load "$D2" --wal-snapshot-bytes $HUGE
bench load "$KEYS" "${LOAD[@]}" --total "$KEYS"
LOAD_RPS=$RPS LOAD_S=$BENCH_S
LOAD_COUNT=$(key_count) LOAD_DB=$(db_size)
[ "$LOAD_COUNT" = "$KEYS" ] || say "  WRONG KEY COUNT after load: $LOAD_COUNT, expected $KEYS"
stop_mem
say "  loaded at $LOAD_RPS req/s in ${LOAD_S}s; store size $(mib "$LOAD_DB") MiB; $(msg "$CLOSED")"
R_DU[wal]=$(du_b "$D2")
restart_case wal --wal-snapshot-bytes $HUGE
[ ! -d "$D2/snap" ] || [ -z "$(ls "$D2/snap")" ] || R_NOTE[wal]="(a snapshot exists!)"

# A snapshot is due once the bytes logged since the last one exceed max(--wal-snapshot-bytes,
# the store's size), and for write-once keys the store's size is more than the log holds (its
# in-memory overhead, about 1.2x), so a load alone never triggers one. Overwrite a third of the
# keys and compact (the store shrinks back, the log does not), until one is written.
say "restart: overwrite + compact until a snapshot is written (--wal-snapshot-bytes $MIB: the store's size decides)"
start_mem snapshot "$D2" --wal-snapshot-bytes $MIB
# How long to wait for a snapshot after a compaction: the check runs every second, and
# writing one takes a while before its `.tmp` directory shows (about 4 s for 1.2 GiB).
SNAP_WAIT=$((5 + LOAD_DB / (50 * MIB)))
SNAP_ROUNDS=0 OVERWRITES=0
while :; do
  if wait_snapshot "$D2" 0 "$([ $SNAP_ROUNDS = 0 ] && echo 3 || echo $SNAP_WAIT)"; then break; fi
  [ $SNAP_ROUNDS -lt 4 ] || { say "  no snapshot after $SNAP_ROUNDS rounds"; R_NOTE[snap]="(NO snapshot was written)"; break; }
  SNAP_ROUNDS=$((SNAP_ROUNDS + 1))
  n=$((KEYS / 3))
  bench "overwrite-$SNAP_ROUNDS" "$n" "${LOAD[@]}" --total "$n"
  OVERWRITES=$((OVERWRITES + n))
  rev=$(cur_rev)
  ctl compaction "$rev" >/dev/null
  say "  round $SNAP_ROUNDS: overwrote $n keys, compacted at $rev"
done
grep 'wal: snapshot written' "$MEM_LOG" | sed 's/.*INFO [^ ]* /  /' >&2 || true
stop_mem
R_DU[snap]=$(du_b "$D2")
restart_case snap --wal-snapshot-bytes $MIB
grep -q 'wal: loaded snapshot' "$MEM_LOG" || R_NOTE[snap]="${R_NOTE[snap]:-} (did not load a snapshot!)"
rm -rf "$D2"

# 3. disk use -----------------------------------------------------------------------------------
D3=$TMP/disk
N3=$((KEYS2 * REWRITES))
# 64 MiB, or less if the run logs too little for that to be reached.
SNAP3=$((64 * MIB))
[ $((N3 * 1100 / 2)) -ge $SNAP3 ] || SNAP3=$((N3 * 1100 / 2))
say "disk: $KEYS2 keys x $REWRITES writes ($N3 puts), --wal-segment-bytes $((16 * MIB)) --wal-snapshot-bytes $SNAP3"
start_mem disk "$D3" --wal-segment-bytes $((16 * MIB)) --wal-snapshot-bytes "$SNAP3"
# One benchmark run per pass: within one run, --sequential-keys reuses its key buffer and a
# short varint after the wrap keeps the previous key's tail bytes, so keys 0..8191 of passes 2+
# would be new keys (100K key space: 8192 more than KEYS2).
DISK_S=0
for pass in $(seq "$REWRITES"); do
  bench "disk-$pass" "$KEYS2" put --key-size 48 --val-size 1024 --key-space-size "$KEYS2" --sequential-keys --total "$KEYS2"
  DISK_S=$(awk -v a="$DISK_S" -v b="$BENCH_S" 'BEGIN{print a + b}')
done
DISK_RPS=$(awk -v n="$N3" -v s="$DISK_S" 'BEGIN{printf "%.0f", n / s}')
DISK_COUNT=$(key_count)
[ "$DISK_COUNT" = "$KEYS2" ] || say "  WRONG KEY COUNT: $DISK_COUNT, expected $KEYS2"
SNAPS_DURING=$(grep -c 'wal: snapshot written' "$MEM_LOG" || true)
DU_BEFORE=$(du_b "$D3") DB_BEFORE=$(db_size)
rev=$(cur_rev)
ctl compaction "$rev" >/dev/null
wait_snapshot "$D3" "$rev" 30 || say "  no snapshot at revision >= $rev within 30s"
DU_AFTER=$(du_b "$D3") DB_AFTER=$(db_size)
grep 'wal: snapshot written' "$MEM_LOG" | sed 's/.*INFO [^ ]* /  /' >&2 || true
SEGS_AFTER=$(find "$D3/wal" -name '*.wal' | wc -l)
stop_mem
DU_STOPPED=$(du_b "$D3")
rm -rf "$D3"

# Results ---------------------------------------------------------------------------------------
ETCD_VER=$("$ETCD_BIN" --version | head -1 | awk '{print $3}')
echo
echo "== 1. benchmark put: $TOTAL requests, $CLIENTS clients / $CONNS conns, 48 B keys, 1 KiB values, 100K key space =="
printf '%-22s %10s %8s %12s %8s %9s %10s %8s %11s\n' server req/s "vs etcd" "cpu µs/req" "vs etcd" \
  batches revs/batch fsyncs revs/fsync
for mode in $PUT_MODES; do
  b=${P_BATCH[$mode]} r=${P_REVS[$mode]} f=${P_FSYNC[$mode]}
  printf '%-22s %10.0f %8s %12s %8s %9s %10s %8s %11s\n' "mem_etcd $mode" "${P_RPS[$mode]}" \
    "$(ratio "${P_RPS[$mode]}" "$E_RPS")" "${P_CPU[$mode]}" "$(ratio "${P_CPU[$mode]}" "$E_CPU")" "$b" \
    "$( [ "$b" = - ] && echo - || ratio "$r" "$b" | tr -d x)" "$f" \
    "$( [ "$f" = - ] || [ "$f" = 0 ] && echo - || ratio "$r" "$f" | tr -d x)"
done
printf '%-22s %10.0f %8s %12s %8s %9s %10s %8s %11s\n' "etcd $ETCD_VER" "$E_RPS" 1.00x "$E_CPU" 1.00x - - \
  "$E_FSYNC" "$(ratio "$TOTAL" "$E_FSYNC" | tr -d x)"
echo "(mem_etcd batches/fsyncs from its 'wal: closed' line; etcd fsyncs = etcd_disk_wal_fsync_duration_seconds_count delta)"
echo
echo "== 2. restart with $KEYS keys of 1 KiB (loaded by benchmark put --sequential-keys at $(printf %.0f "$LOAD_RPS") req/s, ${LOAD_S}s; store size $(mib "$LOAD_DB") MiB) =="
printf '%-24s %9s %7s %8s %12s %11s %9s %9s %9s %9s\n' case "data MiB" "tcp s" "ready s" "1st reply s" \
  "recovery s" replayed "RSS MiB" "peak MiB" keys
for c in wal snap; do
  case $c in
    wal) label="WAL only" ;;
    snap) label="snapshot + WAL" ;;
  esac
  printf '%-24s %9s %7s %8s %12s %11s %9s %9s %9s %9s %s\n' "$label" "$(mib "${R_DU[$c]}")" "${R_TCP[$c]}" \
    "${R_READY[$c]}" "${R_FIRST[$c]}" "${R_SECS[$c]}" "${R_RECORDS[$c]}" "$(mib $((R_RSS[$c] * 1024)))" \
    "$(mib $((R_HWM[$c] * 1024)))" "${R_COUNT[$c]}" "${R_NOTE[$c]:-}"
done
echo "(snapshot case: after $SNAP_ROUNDS round(s) of $((KEYS / 3)) overwrites, each followed by a compaction, and the snapshot."
echo " From launch: tcp = a TCP connect succeeds (the port is bound before recovery), ready = the 'ready to serve'"
echo " log line, 1st reply = an etcdctl count answered (incl. etcdctl's start); recovery = the log's seconds=,"
echo " replayed = WAL records replayed on top of the snapshot; peak = VmHWM)"
echo
echo "== 3. disk use: $KEYS2 keys x $REWRITES writes of 1 KiB ($N3 puts at $DISK_RPS req/s), 16 MiB segments, --wal-snapshot-bytes $(mib "$SNAP3") MiB =="
printf '%-44s %10s\n' "" MiB
printf '%-44s %10s\n' "data dir before compaction" "$(mib "$DU_BEFORE")" \
  "data dir after compaction + snapshot" "$(mib "$DU_AFTER")" \
  "data dir after shutdown" "$(mib "$DU_STOPPED")" \
  "live data: $KEYS2 x (48 + 1024) B" "$(mib $((KEYS2 * 1072)))" \
  "store size (Status dbSize) before compaction" "$(mib "$DB_BEFORE")" \
  "store size (Status dbSize) after" "$(mib "$DB_AFTER")"
echo "(snapshots written during the load: $SNAPS_DURING; WAL segments left after the snapshot: $SEGS_AFTER)"
echo
DEV=$(findmnt -n -o SOURCE -T "$DATA_ROOT")
echo "hardware: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/{print $2}') GiB RAM"
echo "DATA_ROOT $DATA_ROOT: $DEV $(findmnt -n -o FSTYPE,OPTIONS -T "$DATA_ROOT" | cut -c1-60), rotational=$(cat "/sys/block/$(basename "$DEV")/queue/rotational" 2>/dev/null || echo ?), 4 KiB O_DSYNC append: ${DSYNC_MS} ms"
echo "settings: DATA_ROOT=$DATA_ROOT TOTAL=$TOTAL KEYS=$KEYS KEYS2=$KEYS2 REWRITES=$REWRITES CLIENTS=$CLIENTS CONNS=$CONNS; mem_etcd $("$MEM" --version | awk '{print $2}') from $MEM_ETCD_BIN"
echo "logs and benchmark outputs: /tmp/wal_compare-*.{log,out}"
