#!/usr/bin/env bash
# Kubernetes under load (issue 28): a real kube-apiserver 1.36 on each datastore, driven by
# benches/k8s_load (client-go), with the same profiles and concurrencies for every backend.
# For each backend x profile x concurrency it starts a fresh datastore (data on tmpfs) and a
# fresh kube-apiserver, runs the load, and records the datastore's and kube-apiserver's CPU
# seconds during the load and their peak RSS (VmHWM, summed over a datastore's processes); then
# prints one table per profile and draws one chart per profile (benches/k8s_charts.py). The
# results, one JSON line per run, go to $RESULTS. A run that fails (the datastore or
# kube-apiserver does not start, the load tool fails, or with STRICT a fault) is recorded there
# (a "failed" or "faults" field, a FAILED row in the table) and the sweep goes on; the script
# exits 1 at the end if any run failed.
#
# Usage: benches/k8s_load.sh
# env: BACKENDS     (default "mem_etcd etcd"): mem_etcd, etcd (a member alone, etcd 3.6.16);
#                   mem_etcd3, etcd3 (3-member clusters on 127.0.0.1, every member in
#                   kube-apiserver's --etcd-servers); kine (kine v0.17.5 on SQLite, k3s's
#                   default: its default database file and options); kine_pg (kine on a fresh
#                   PostgreSQL cluster, Debian's package, initdb'd in a temp dir and listening on
#                   127.0.0.1 only; CPU and RSS are kine's plus every postgres process's)
#      PROFILES     (default "create-list watch-churn"; also density, below)
#      CONCURRENCY  (default "10 50 200"): client counts, each a run of its own
#      OBJECTS      (default 10000): ConfigMaps per run
#      WATCHERS     (25), VALUE_BYTES (1024), LISTS (200: full lists in create-list),
#      PAGE_SIZE    (500), RUN_TIMEOUT (15m: bound on each run of the load)
#      QPS          (unset: as fast as the servers go): each client's rate limit, so a run
#                   writes at most QPS x clients a second (to compare backends at one rate)
#      density: one run per backend (CONCURRENCY is not used): DENSITY_CLIENTS (10) clients
#      create DENSITY_OBJECTS (1000) ConfigMaps of VALUE_BYTES and DENSITY_LEASES (100) node
#      Leases in kube-node-lease, then renew every Lease every DENSITY_RENEW (10s) as kubelet
#      does; after one such interval, the datastore's and kube-apiserver's CPU seconds over
#      DENSITY_WINDOW (60s) and their RSS at its end (VmRSS, VmHWM; PSS in the JSON)
#      MEM_BIN      (the mem_etcd binary; else this tree's release build), MEM_ARGS (extra flags)
#      ETCD_BIN, KUBE_APISERVER_BIN, KINE_BIN, PG_BIN (PostgreSQL's bin directory) (else built,
#      installed and cached by tests/peers/install_*.sh); PG_ARGS (extra postgres flags, e.g.
#      "-c max_connections=300")
#      K8S_LOAD_BIN (else benches/k8s_load built and cached in ~/.cache/mem_etcd/k8s_load/, with
#      the Go of tests/peers/install_go.sh: Go >= 1.26 on PATH or in /usr/local/go, else
#      go1.26.8 fetched once into ~/.cache/mem_etcd/go)
#      APISERVER_ARGS (extra kube-apiserver flags), RESULTS (/tmp/k8s_load-results.jsonl),
#      LOG_DIR (/tmp/k8s_load-logs: each run's kube-apiserver and datastore logs)
#      CHARTS_DIR (/tmp/k8s_load-charts: one SVG per profile, write throughput, write p99 and
#      watch lag p99 against concurrency; the committed ones are in benches/k8s_load-charts/),
#      CHARTS=0 (no charts)
#      STRICT=1 (a run fails when a request failed, a list was incomplete or a watch event was
#      missing, unexpected, duplicated or out of order: tests/run.sh's check)
#      FOLLOW=1 (etcd and etcd3 only: the live move, issue 51): a mem_etcd copy of
#      FOLLOW_MEMBERS (1) members starts empty beside the fresh etcd, and `mem_etcd follow`
#      keeps it at etcd's revisions through the run; after the load kube-apiserver stops and
#      follow cuts over (--until-idle FOLLOW_IDLE, 2s). A run fails unless the cut-over is exact.
#      Its lag per revision (p50, p99, max over the run) and the cut-over's time after
#      kube-apiserver's stop are printed at the end. The copy and follow share the cores (their
#      CPU is not in the datastore's figures).
# The load client runs on the same cores as the servers; its CPU seconds are in the table too.
set -euo pipefail
cd "$(dirname "$0")/.."

BACKENDS=${BACKENDS:-mem_etcd etcd}
CONCURRENCY=${CONCURRENCY:-10 50 200}
PROFILES=${PROFILES:-create-list watch-churn}
OBJECTS=${OBJECTS:-10000}
WATCHERS=${WATCHERS:-25}
VALUE_BYTES=${VALUE_BYTES:-1024}
LISTS=${LISTS:-200}
PAGE_SIZE=${PAGE_SIZE:-500}
RUN_TIMEOUT=${RUN_TIMEOUT:-15m}
DENSITY_CLIENTS=${DENSITY_CLIENTS:-10}
DENSITY_OBJECTS=${DENSITY_OBJECTS:-1000}
DENSITY_LEASES=${DENSITY_LEASES:-100}
DENSITY_RENEW=${DENSITY_RENEW:-10s}
DENSITY_WINDOW=${DENSITY_WINDOW:-60s}
RESULTS=${RESULTS:-/tmp/k8s_load-results.jsonl}
LOG_DIR=${LOG_DIR:-/tmp/k8s_load-logs}
CHARTS_DIR=${CHARTS_DIR:-/tmp/k8s_load-charts}
DS_PORT=23891      # member i: client port DS_PORT + 2i, peer port DS_PORT + 2i + 1; kine: DS_PORT
PG_PORT=23901      # kine_pg's PostgreSQL
API_PORT=26443

log() { echo "[k8s_load $(date +%H:%M:%S)] $*" >&2; }

ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
KUBE_APISERVER_BIN=${KUBE_APISERVER_BIN:-$(tests/peers/install_k8s.sh | tail -1)/kube-apiserver}
if [[ " $BACKENDS " == *" kine"* && -z "${KINE_BIN:-}" ]] ||
    [[ " $BACKENDS " == *" kine_pg "* && -z "${PG_BIN:-}" ]]; then
  # Its last line is kine's directory; the one before, PostgreSQL's bin directory.
  if [[ " $BACKENDS " == *" kine_pg "* ]]; then kine_out=$(tests/peers/install_kine.sh)
  else kine_out=$(NO_POSTGRES=1 tests/peers/install_kine.sh); fi
  KINE_BIN=${KINE_BIN:-$(tail -1 <<<"$kine_out")/kine}
  if [[ " $BACKENDS " == *" kine_pg "* ]]; then PG_BIN=${PG_BIN:-$(tail -2 <<<"$kine_out" | head -1)}; fi
fi
FOLLOW=${FOLLOW:-0}
FOLLOW_MEMBERS=${FOLLOW_MEMBERS:-1}
FOLLOW_IDLE=${FOLLOW_IDLE:-2s}
if [[ " $BACKENDS " == *" mem_etcd"* || "$FOLLOW" = 1 ]] && [ -z "${MEM_BIN:-}" ]; then
  cargo build --release --quiet
fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
read -ra MEM_EXTRA <<<"${MEM_ARGS:-}"
read -ra APISERVER_EXTRA <<<"${APISERVER_ARGS:-}"
read -ra PG_EXTRA <<<"${PG_ARGS:-}"
# shellcheck source=benches/cluster.sh
. benches/cluster.sh
k8s_load_tool

TMP=$(mktemp -d /dev/shm/k8s_load.XXXXXX)
DS_PIDS=() API_PID='' KINE_PID='' PG_PID='' PG_DIR='' FOLLOW_PID='' COPY_PIDS=()
FOLLOWS=()  # one line per FOLLOW run, printed at the end

cleanup() {
  stop_all
  rm -rf "$TMP"
}
trap cleanup EXIT
: >"$RESULTS"
mkdir -p "$LOG_DIR"

# The datastore's processes are started in TMP (its logs: TMP/*.log).
# Waits until ETCD_SERVERS answers a read (30 s at most). Not `etcdctl endpoint health`: it
# lists alarms, which kine does not implement.
# Gives up early when one of DS_PIDS has exited.
wait_serving() {
  local end=$((SECONDS + 30)) p
  while [ "$SECONDS" -lt "$end" ]; do
    "$ETCDCTL" --endpoints "$ETCD_SERVERS" --dial-timeout 1s --command-timeout 1s get health \
      >/dev/null 2>&1 && return 0
    for p in "${DS_PIDS[@]}"; do
      kill -0 "$p" 2>/dev/null || { log "pid $p exited"; return 1; }
    done
    sleep 0.1
  done
  return 1
}

# kine on 127.0.0.1:DS_PORT, its working directory TMP/kine (SQLite's default database file,
# ./db/state.db, goes there); extra arguments (--endpoint) are kine's. Metrics off (their
# default listener is on every address).
start_kine() {
  mkdir -p "$TMP/kine"
  (cd "$TMP/kine" && exec "$KINE_BIN" --listen-address "127.0.0.1:$DS_PORT" \
    --metrics-bind-address 0 "$@") >"$TMP/kine.log" 2>&1 &
  KINE_PID=$!
  DS_PIDS=("$KINE_PID" ${PG_PID:+"$PG_PID"})
  ETCD_SERVERS="http://127.0.0.1:$DS_PORT"
  wait_serving && return 0
  log "kine did not start"; tail -5 "$TMP/kine.log" >&2; return 1
}

# A fresh PostgreSQL cluster in a temp dir on tmpfs, on 127.0.0.1:PG_PORT only (its socket in
# that dir), with trust authentication for the user postgres; everything else at PostgreSQL's
# defaults. Run as the user postgres when this script runs as root (PostgreSQL refuses root).
start_postgres() {
  local as=()
  PG_DIR=$(mktemp -d /dev/shm/k8s_load-pg.XXXXXX)
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$PG_DIR"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
  if ! "${as[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 --no-sync \
      >"$TMP/initdb.log" 2>&1; then
    log "initdb failed"; tail -5 "$TMP/initdb.log" >&2; return 1
  fi
  "${as[@]}" "$PG_BIN/postgres" -D "$PG_DIR/data" -c listen_addresses=127.0.0.1 -p "$PG_PORT" \
    -c unix_socket_directories="$PG_DIR" ${PG_EXTRA[@]+"${PG_EXTRA[@]}"} >"$TMP/postgres.log" 2>&1 &
  PG_PID=$!
  DS_PIDS=("$PG_PID")
  local end=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$end" ] && kill -0 "$PG_PID" 2>/dev/null; do
    "$PG_BIN/pg_isready" -q -t 1 -h 127.0.0.1 -p "$PG_PORT" && return 0
    sleep 0.1
  done
  log "postgres did not start"; tail -5 "$TMP/postgres.log" >&2; return 1
}

# Starts the datastore BACKEND: sets DS_PIDS (its processes, as the load tool samples them:
# each with its descendants) and ETCD_SERVERS (kube-apiserver's --etcd-servers). Returns 1 if
# it does not serve; what it started is in DS_PIDS, KINE_PID and PG_PID for stop_all.
start_backend() {
  local rc=0
  DS_PIDS=() ETCD_SERVERS=''
  case $1 in
    mem_etcd|etcd) cluster_start "$1" 1 "$TMP" "$DS_PORT" "k8s-load-$$" || rc=$? ;;
    mem_etcd3|etcd3) cluster_start "${1%3}" 3 "$TMP" "$DS_PORT" "k8s-load-$$" || rc=$? ;;
    kine) start_kine; return ;;
    kine_pg)
      start_postgres || return 1
      start_kine --endpoint "postgres://postgres@127.0.0.1:$PG_PORT/kubernetes?sslmode=disable"
      return ;;
    *) log "unknown backend '$1' (mem_etcd, etcd, mem_etcd3, etcd3, kine, kine_pg)"; exit 2 ;;
  esac
  DS_PIDS=(${CLUSTER_PIDS[@]+"${CLUSTER_PIDS[@]}"}) ETCD_SERVERS=$CLUSTER_URLS
  return "$rc"
}


# kube-apiserver first: its graceful shutdown needs the datastore; then kine, then PostgreSQL
# (SIGTERM: a smart shutdown, which waits for kine's connections to close).
stop_all() {
  if [ -n "$API_PID" ]; then stop_pids "$API_PID"; fi
  if [ -n "$FOLLOW_PID" ]; then stop_pids "$FOLLOW_PID"; fi
  if [ ${#COPY_PIDS[@]} -gt 0 ]; then stop_pids "${COPY_PIDS[@]}"; fi
  FOLLOW_PID='' COPY_PIDS=()
  if [ -n "$KINE_PID" ]; then stop_pids "$KINE_PID"; fi
  if [ -n "$PG_PID" ]; then stop_pids "$PG_PID"; fi
  if [ ${#DS_PIDS[@]} -gt 0 ]; then stop_pids "${DS_PIDS[@]}"; fi
  API_PID='' KINE_PID='' PG_PID='' DS_PIDS=()
  if [ -n "$PG_DIR" ]; then rm -rf "$PG_DIR"; PG_DIR=''; fi
  rm -rf "$TMP"/*etcd[0-9] "$TMP/kine" "$TMP/apiserver" "$TMP"/*.log
}

# A run that gave no results, as a JSON line of its own: LABEL PROFILE CLIENTS OBJECTS REASON.
record_failure() {
  local why
  why=$(tr -d '"\\\000-\037' <<<"$5" | cut -c1-300)
  printf '{"label":"%s","profile":"%s","clients":%d,"objects":%d,"failed":"%s"}\n' \
    "$1" "$2" "$3" "$4" "$why" >>"$RESULTS"
}

# FOLLOW=1: the copy, started empty (at revision 1, as the fresh etcd is) on DS_PORT + 20..,
# and `mem_etcd follow` from every etcd member to every copy member. Sets COPY_PIDS, FOLLOW_PID.
start_follow() {
  local source=$ETCD_SERVERS
  cluster_start mem_etcd "$FOLLOW_MEMBERS" "$TMP" "$((DS_PORT + 20))" "k8s-load-copy-$$" || {
    COPY_PIDS=(${CLUSTER_PIDS[@]+"${CLUSTER_PIDS[@]}"}); return 1; }
  COPY_PIDS=("${CLUSTER_PIDS[@]}")
  "$MEM" follow --source "$source" --target "$CLUSTER_URLS" --until-idle "$FOLLOW_IDLE" \
    >"$TMP/follow.log" 2>&1 &
  FOLLOW_PID=$!
}

# FOLLOW=1, after the load: kube-apiserver stops, and follow must cut over exact within 120 s.
# LABEL. Adds a line to FOLLOWS; returns 1 when the cut-over failed.
finish_follow() {
  local t0 frc=0 lag cut
  t0=$(date +%s%N)
  stop_pids "$API_PID"
  API_PID=''
  local end=$((SECONDS + 120))
  while kill -0 "$FOLLOW_PID" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
  cut=$((($(date +%s%N) - t0) / 1000000))
  if kill -0 "$FOLLOW_PID" 2>/dev/null; then frc=timeout; else wait "$FOLLOW_PID" || frc=$?; fi
  FOLLOW_PID=''
  lag=$(sed -n 's/^followed from revision [0-9]*: //p' "$TMP/follow.log")
  FOLLOWS+=("$1: ${lag:-no lag line}; cut-over $cut ms after kube-apiserver's stop began; exit $frc")
  grep -v '^applied revision' "$TMP/follow.log" | tail -5 >&2
  [ "$frc" = 0 ] || { log "FAILED: follow did not cut over (exit $frc; $TMP/follow.log)"; return 1; }
}

# One run: BACKEND PROFILE CLIENTS. Returns 1 when it failed (recorded in RESULTS).
run_one() {
  local backend=$1 profile=$2 clients=$3 objects=$OBJECTS rc=0 extra=()
  if [ "$profile" = density ]; then
    objects=$DENSITY_OBJECTS
    extra=(--leases "$DENSITY_LEASES" --renew-interval "$DENSITY_RENEW" --window "$DENSITY_WINDOW")
  fi
  log "$backend $profile clients=$clients objects=$objects"
  if ! start_backend "$backend"; then
    record_failure "$backend" "$profile" "$clients" "$objects" "$backend did not start (logs in $LOG_DIR): $(tail -q -n1 "$TMP"/*.log 2>/dev/null | tail -1)"
    return 1
  fi
  if [ "$FOLLOW" = 1 ] && [[ $backend == etcd || $backend == etcd3 ]] && ! start_follow; then
    record_failure "$backend" "$profile" "$clients" "$objects" "the copy did not start: $(tail -q -n1 "$TMP"/mem_etcd*.log 2>/dev/null | tail -1)"
    return 1
  fi
  if ! start_apiserver "$TMP/apiserver" "$API_PORT"; then
    record_failure "$backend" "$profile" "$clients" "$objects" "kube-apiserver did not become ready: $(tail -1 "$TMP/apiserver/log")"
    return 1
  fi
  "$TOOL" --kubeconfig "$TMP/apiserver/kubeconfig" --profile "$profile" --clients "$clients" \
    --objects "$objects" --watchers "$WATCHERS" --value-bytes "$VALUE_BYTES" \
    --lists "$LISTS" --page-size "$PAGE_SIZE" --timeout "$RUN_TIMEOUT" --label "$backend" \
    --datastore-pids "${DS_PIDS[*]}" --apiserver-pids "$API_PID" ${STRICT:+--strict} \
    ${QPS:+--qps "$QPS"} "${extra[@]}" \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
  # The JSON line is kept whenever the tool wrote one (with STRICT, a run with faults exits 2
  # after writing it: its "faults" say what).
  grep '^{' "$TMP/out" >>"$RESULTS" || true
  grep -v '^{' "$TMP/out" >&2 || true
  if [ -n "$FOLLOW_PID" ] && ! finish_follow "$backend $profile clients=$clients"; then
    record_failure "$backend" "$profile" "$clients" "$objects" "follow did not cut over: $(tail -1 "$TMP/follow.log")"
    return 1
  fi
  if [ "$rc" -ne 0 ]; then
    log "FAILED: $backend $profile clients=$clients (exit $rc)"; tail -20 "$TMP/err" >&2
    tail -20 "$TMP/apiserver/log" >&2
    if ! grep -q '^{' "$TMP/out"; then
      record_failure "$backend" "$profile" "$clients" "$objects" "load tool exited $rc: $(grep -v '^ *$' "$TMP/err" | tail -1)"
    fi
    return 1
  fi
}


failed=0
for backend in $BACKENDS; do
  for profile in $PROFILES; do
    concurrency=$CONCURRENCY
    if [ "$profile" = density ]; then concurrency=$DENSITY_CLIENTS; fi
    for clients in $concurrency; do
      t0=$SECONDS
      run_one "$backend" "$profile" "$clients" || failed=$((failed + 1))
      if [ -f "$TMP/apiserver/log" ]; then cp "$TMP/apiserver/log" "$LOG_DIR/$backend-$profile-$clients.apiserver.log"; fi
      for f in "$TMP"/*.log; do
        if [ -f "$f" ]; then cp "$f" "$LOG_DIR/$backend-$profile-$clients.$(basename "$f")"; fi
      done
      stop_all
      log "$backend $profile clients=$clients: $((SECONDS - t0)) s"
    done
  done
done

"$TOOL" table "$RESULTS"
echo
if [[ " $PROFILES " == *" create-list "* || " $PROFILES " == *" watch-churn "* ]]; then
  echo "($(nproc) cores; kube-apiserver $("$KUBE_APISERVER_BIN" --version | awk '{print $2}'); $OBJECTS ConfigMaps of $VALUE_BYTES bytes per run; $WATCHERS watchers; $LISTS lists of pages of $PAGE_SIZE; CPU seconds during the load, peak RSS over the process's life (fresh per run); JSON lines in $RESULTS)"
fi
if [[ " $PROFILES " == *" density "* ]]; then
  echo "($(nproc) cores; kube-apiserver $("$KUBE_APISERVER_BIN" --version | awk '{print $2}'); density: $DENSITY_OBJECTS ConfigMaps of $VALUE_BYTES bytes and $DENSITY_LEASES Leases created by $DENSITY_CLIENTS clients, every Lease renewed every $DENSITY_RENEW; CPU over a $DENSITY_WINDOW window after one renewal interval, RSS at its end; JSON lines in $RESULTS)"
fi
if [[ " $BACKENDS " == *" kine"* ]]; then echo "($("$KINE_BIN" --version 2>&1 | head -1))"; fi
if [ ${#FOLLOWS[@]} -gt 0 ]; then
  echo
  echo "mem_etcd follow ($FOLLOW_MEMBERS-member copy; lag per revision from etcd's watch answer to the copy's Txn answer, over the run; --until-idle $FOLLOW_IDLE):"
  printf '  %s\n' "${FOLLOWS[@]}"
fi
if [ "${CHARTS:-1}" != 0 ]; then
  if command -v python3 >/dev/null; then
    python3 benches/k8s_charts.py --out "$CHARTS_DIR" "$RESULTS" || log "charts failed"
  else
    log "no python3: no charts"
  fi
fi
if [ "$failed" -gt 0 ]; then log "$failed run(s) failed"; exit 1; fi
