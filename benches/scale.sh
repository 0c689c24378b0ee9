#!/usr/bin/env bash
# Scale (issue 30): how mem_etcd's costs grow with the store, next to etcd 3.6, at each of SIZES
# objects. The store is filled with Kubernetes objects in kube-apiserver's storage encoding, written
# straight to the datastore (`k8s_load scale-fill`): per 100 objects 40 node Leases (~330 B), 6
# Nodes (~9.6 KB), 4 Pods (~4 KB) and 50 Events (~460 B, each attached to one of 60 leases, as
# kube-apiserver attaches them), about 1.1 KB on average, so 10M objects are about 10 GiB of values.
# Data directories are on disk (SCALE_DIR), not tmpfs: a 10 GiB store's files would not fit in RAM
# beside it.
#
# Measured at each size, for each store (mem_etcd, then etcd; never both running at once):
#   fill        objects/s of the fill (200 puts in flight over 10 connections), then RSS: per
#               object and per byte of key and value (RSS minus the empty server's)
#   compact     1M more revisions (the first 1M objects written again), then a physical compaction
#               at the head: its seconds, and the write latency of 1,000 Lease renewals/s
#               running meanwhile (p99, max, how many over 50 ms)
#   list        every Pod read straight from the store as kube-apiserver's storage reads it with
#               its watch cache off (pages of 500 at the first page's revision, then one range
#               of the whole prefix), then kube-apiserver 1.36 on the store (--watch-cache=false,
#               so its lists reach the datastore) listing every Pod in pages of 500, then
#               unpaged; seconds, and the renewals' latency meanwhile. kube-apiserver is
#               skipped where it would not fit in the free memory: its own informers hold every
#               Pod and Node decoded (about 5x their bytes; no flag turns them off), and an
#               unpaged list needs about 8x the Pods' bytes more
#   restart     kill -9, then the same command again: seconds until a linearizable read is
#               served (the files are in the page cache, as on a machine that restarts the
#               process, not the host)
#   catchup     a second member added as a learner (`member add --learner`, then started empty with
#               --initial-cluster-state existing): seconds until it serves a local read at the
#               leader's revision, and the renewals' latency on the leader meanwhile. Skipped
#               where two copies do not fit in the free memory
#   fsync       mem_etcd only: filled again with --fsync, then kill -9 and restart timed (etcd
#               always fsyncs: its one restart figure is both modes')
#   cluster     three members filled: the largest member's RSS and the fill rate; then, with
#               compact among the measures, the compaction as above, renewals on member 0 and
#               3 s after its answer (the other members walk it on their own). Skipped where
#               three copies do not fit
#
# Usage: benches/scale.sh
# env: SIZES (objects, default "1000000 5000000 10000000"), STORES ("mem_etcd etcd"), MEASURES
#      ("fill compact list restart catchup fsync cluster"; fill always runs), SCALE_DIR (where
#      data directories go, default /var/tmp; needs about 3x the largest store's size free),
#      RESULTS (/tmp/scale-results.jsonl: one JSON line per measure), MEM_BIN, ETCD_BIN,
#      KUBE_APISERVER_BIN, K8S_LOAD_BIN (else built or installed as the other benches do).
# The table at the end is printed by `k8s_load scale-table RESULTS` (sizes by columns).
# A quick try: SIZES=100000 benches/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-1000000 5000000 10000000}
STORES=${STORES:-mem_etcd etcd}
MEASURES=${MEASURES:-fill compact list restart catchup fsync cluster}
RESULTS=${RESULTS:-/tmp/scale-results.jsonl}
PORT=24791 API_PORT=26543
ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
if [[ " $MEASURES " == *" list "* ]]; then
  KUBE_APISERVER_BIN=${KUBE_APISERVER_BIN:-$(tests/peers/install_k8s.sh | tail -1)/kube-apiserver}
fi
if [ -z "${MEM_BIN:-}" ]; then cargo build --release --quiet; fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
MEM_EXTRA=()
APISERVER_EXTRA=(--watch-cache=false)
# etcd refuses nothing up to its hard limit; 8 GiB, its recommended maximum, is too small here.
export CLUSTER_QUOTA=$((64 << 30))
# shellcheck source=benches/cluster.sh
. benches/cluster.sh
k8s_load_tool
TMP=$(mktemp -d "${SCALE_DIR:-/var/tmp}/scale.XXXXXX")
PIDS=() API_PID=''
cleanup() {
  if [ -n "$API_PID" ]; then stop_pids "$API_PID"; fi
  if [ ${#PIDS[@]} -gt 0 ]; then kill -9 "${PIDS[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
: >"$RESULTS"

say() { echo "[scale $(date +%T)] $*" >&2; }
has() { [[ " $MEASURES " == *" $1 "* ]]; }
rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
mem_available_kib() { awk '$1 == "MemAvailable:" {print $2}' /proc/meminfo; }
url() { cluster_client_url "$PORT" "$1"; }
ep() { echo "127.0.0.1:$((PORT + 2 * $1))"; }

# record STORE SIZE MEASURE JSON: one result line.
record() {
  local line="{\"store\":\"$1\",\"size\":$2,\"measure\":\"$3\",\"result\":$4}"
  echo "$line" >>"$RESULTS"
  say "$line"
}

# Renewals at 1,000/s on ENDPOINTS in the background, stopped by end_writes, whose output
# (the latency JSON) is WRITES_JSON.
begin_writes() {
  "$TOOL" scale-writes -endpoints "$1" -keys "$2" -rate 1000 -conns 4 -duration 30m >"$TMP/writes.json" &
  WRITES_PID=$!
  sleep 1
}
end_writes() {
  kill -TERM "$WRITES_PID"
  wait "$WRITES_PID"
  WRITES_JSON=$(cat "$TMP/writes.json")
}

# list_pods KIND SIZE MEASURE LIMIT: every Pod through kube-apiserver (pages of LIMIT, 0:
# unpaged) while renewals run; a failed list is recorded as such, with kube-apiserver's last
# lines on stderr.
# With SOURCE "store" instead of "apiserver", straight from the store at member 0.
list_pods() {
  local l from=(-endpoints "$(ep 0)")
  if [ "$5" = apiserver ]; then from=(-kubeconfig "$TMP/apiserver/kubeconfig"); fi
  begin_writes "$(ep 0)" "$2"
  if l=$("$TOOL" scale-list "${from[@]}" -limit "$4"); then
    end_writes
    record "$1" "$2" "$3" "{\"list\":$l,\"writes\":$WRITES_JSON}"
  else
    end_writes
    if [ "$5" = apiserver ]; then tail -5 "$TMP/apiserver/log" >&2; fi
    record "$1" "$2" "$3" '{"skipped":"the list failed"}'
  fi
}

# A member alone of KIND on a fresh data directory (MEM_EXTRA for mem_etcd's mode).
start_alone() {
  rm -rf "$TMP/$1"[0-9]*
  cluster_start "$1" 1 "$TMP" "$PORT" "scale-$$" || exit 1
  PIDS=("${CLUSTER_PIDS[@]}")
}
stop_all() {
  if [ ${#PIDS[@]} -gt 0 ]; then stop_pids "${PIDS[@]}"; fi
  PIDS=()
}

# kill -9 of member 0 and the same command again; RESTART_JSON: seconds until it serves.
restart_alone() {
  kill -9 "${PIDS[0]}"
  wait "${PIDS[0]}" 2>/dev/null || true
  cluster_member "$1" 0 "m0=$(cluster_peer_url "$PORT" 0)" "$TMP" "$PORT" "scale-$$" new
  PIDS=("$MEMBER_PID")
  RESTART_JSON=$("$TOOL" scale-wait -endpoint "$(ep 0)" -timeout 30m)
}

fill() { # SIZE ENDPOINTS [START]
  "$TOOL" scale-fill -endpoints "$2" -keys "$1" -start "${3:-0}" -workers 200 -conns 10
}

# compact_under_renewals KIND SIZE MEASURE ENDPOINTS SETTLE: the first min(SIZE, 1M) objects
# written again over ENDPOINTS, then a physical compaction at the head through member 0 under
# renewals on member 0, which run on for SETTLE seconds after its answer.
compact_under_renewals() {
  local kind=$1 size=$2 measure=$3 endpoints=$4 settle=$5 again c
  again=$((size < 1000000 ? size : 1000000))
  fill "$again" "$endpoints" >/dev/null
  begin_writes "$(ep 0)" "$size"
  c=$("$TOOL" scale-compact -endpoints "$(ep 0)")
  sleep "$settle"
  end_writes
  record "$kind" "$size" "$measure" "{\"compact\":$c,\"revisions\":$again,\"writes\":$WRITES_JSON}"
}

measure_store() {
  local kind=$1 size=$2 empty loaded res bytes
  say "$kind, $size objects: member alone"
  MEM_EXTRA=()
  start_alone "$kind"
  sleep 2
  empty=$(rss_kib "${PIDS[0]}")
  res=$(fill "$size" "$(ep 0)")
  sleep 5
  loaded=$(rss_kib "${PIDS[0]}")
  bytes=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["key_bytes"] + r["value_bytes"])' "$res")
  record "$kind" "$size" fill "{\"fill\":$res,\"rss_empty_kib\":$empty,\"rss_kib\":$loaded,\"data_bytes\":$bytes,\"disk_kib\":$(du -sk "$TMP/${kind}0" | cut -f1)}"

  if has compact; then
    say "$kind: objects written again, then compaction under renewals"
    compact_under_renewals "$kind" "$size" compact "$(ep 0)" 1
  fi

  if has list; then
    say "$kind: every Pod read from the store"
    list_pods "$kind" "$size" list-store-paged 500 store
    list_pods "$kind" "$size" list-store-unpaged 0 store
    # kube-apiserver's Pod and Node informers (service-account token checks) decode all of
    # both; beside them an unpaged list decodes the Pods again.
    local pods_bytes=$((size / 100 * 4 * 4100)) nodes_bytes=$((size / 100 * 6 * 9600)) informers m
    informers=$(((pods_bytes + nodes_bytes) * 5))
    if [ $((informers >> 10)) -gt "$(mem_available_kib)" ]; then
      say "$kind: kube-apiserver would need about $((informers >> 30)) GiB for its informers"
      for m in list-paged list-unpaged; do
        record "$kind" "$size" $m "{\"skipped\":\"kube-apiserver's informers would need about $((informers >> 30)) GiB\"}"
      done
    else
      say "$kind: kube-apiserver lists every Pod"
      ETCD_SERVERS=$(url 0)
      if start_apiserver "$TMP/apiserver" "$API_PORT"; then
        list_pods "$kind" "$size" list-paged 500 apiserver
        if [ $((pods_bytes / 1024 * 8)) -lt "$(mem_available_kib)" ]; then
          list_pods "$kind" "$size" list-unpaged 0 apiserver
        else
          record "$kind" "$size" list-unpaged "{\"skipped\":\"kube-apiserver would need about $((pods_bytes * 8 >> 30)) GiB\"}"
        fi
        stop_pids "$API_PID"
        API_PID=''
      else
        record "$kind" "$size" list-paged '{"skipped":"kube-apiserver did not start"}'
      fi
      rm -rf "$TMP/apiserver"
    fi
  fi

  if has restart; then
    say "$kind: kill -9 and restart"
    restart_alone "$kind"
    record "$kind" "$size" restart "$RESTART_JSON"
    # Read as the fill's is, once the allocator has returned what the replay freed.
    sleep 5
    record "$kind" "$size" restart-rss "{\"rss_kib\":$(rss_kib "${PIDS[0]}")}"
  fi

  if has catchup; then
    loaded=$(rss_kib "${PIDS[0]}")
    if [ $((loaded * 13 / 10)) -lt "$(mem_available_kib)" ]; then
      say "$kind: a second member catches up"
      local head initial
      head=$("$TOOL" scale-wait -endpoint "$(ep 0)" | python3 -c 'import json,sys; print(json.load(sys.stdin)["revision"])')
      if "$ETCDCTL" --endpoints "$(url 0)" --command-timeout 60s member add m1 --learner \
          --peer-urls "$(cluster_peer_url "$PORT" 1)" >/dev/null; then
        initial="m0=$(cluster_peer_url "$PORT" 0),m1=$(cluster_peer_url "$PORT" 1)"
        begin_writes "$(ep 0)" "$size"
        cluster_member "$kind" 1 "$initial" "$TMP" "$PORT" "scale-$$" existing
        PIDS+=("$MEMBER_PID")
        c=$("$TOOL" scale-wait -endpoint "$(ep 1)" -serializable -min-revision "$head" -timeout 30m)
        end_writes
        record "$kind" "$size" catchup "{\"catchup\":$c,\"rss_kib\":$(rss_kib "$MEMBER_PID"),\"writes\":$WRITES_JSON}"
      else
        record "$kind" "$size" catchup '{"skipped":"member add failed"}'
      fi
    else
      record "$kind" "$size" catchup "{\"skipped\":\"a second copy does not fit in free memory\"}"
    fi
  fi
  stop_all
  rm -rf "$TMP/$kind"[0-9]*

  if has fsync && [ "$kind" = mem_etcd ]; then
    say "$kind: filled with --fsync, kill -9, restart"
    MEM_EXTRA=(--fsync)
    start_alone "$kind"
    fill "$size" "$(ep 0)" >/dev/null
    restart_alone "$kind"
    record "$kind" "$size" restart-fsync "$RESTART_JSON"
    stop_all
    rm -rf "$TMP/$kind"[0-9]*
    MEM_EXTRA=()
  fi

  if has cluster; then
    if [ $((loaded * 35 / 10)) -lt "$(mem_available_kib)" ]; then
      say "$kind: three members filled"
      cluster_start "$kind" 3 "$TMP" "$PORT" "scale-$$" || exit 1
      PIDS=("${CLUSTER_PIDS[@]}")
      res=$(fill "$size" "$CLUSTER_ENDPOINTS")
      sleep 5
      local p max=0
      for p in "${PIDS[@]}"; do [ "$(rss_kib "$p")" -gt "$max" ] && max=$(rss_kib "$p"); done
      record "$kind" "$size" cluster "{\"fill\":$res,\"rss_kib\":$max,\"data_bytes\":$bytes}"
      if has compact; then
        say "$kind: three members, objects written again, then compaction under renewals"
        # The other members walk the compaction on their own: renewals meanwhile count too.
        compact_under_renewals "$kind" "$size" cluster-compact "$CLUSTER_ENDPOINTS" 3
      fi
      stop_all
      rm -rf "$TMP/$kind"[0-9]*
    else
      record "$kind" "$size" cluster "{\"skipped\":\"three copies do not fit in free memory\"}"
    fi
  fi
}

for size in $SIZES; do
  for kind in $STORES; do
    measure_store "$kind" "$size"
  done
done
"$TOOL" scale-table "$RESULTS"
