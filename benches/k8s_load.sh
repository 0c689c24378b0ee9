#!/usr/bin/env bash
# Kubernetes under load (issue 28): a real kube-apiserver 1.36 on each datastore, driven by
# benches/k8s_load (client-go), with the same profiles and concurrencies for every backend.
# For each backend x profile x concurrency it starts a fresh datastore (data on tmpfs) and a
# fresh kube-apiserver, runs the load, and records the datastore's and kube-apiserver's CPU
# seconds during the load and their peak RSS (VmHWM, summed over a datastore's members); then
# prints one table per profile. The results, one JSON line per run, go to $RESULTS.
#
# Usage: benches/k8s_load.sh
# env: BACKENDS     (default "mem_etcd etcd"): mem_etcd, etcd (a member alone, etcd 3.6.16);
#                   mem_etcd3, etcd3 (3-member clusters on 127.0.0.1, every member in
#                   kube-apiserver's --etcd-servers)
#      CONCURRENCY  (default "10 50 200"): client counts, each a run of its own
#      PROFILES     (default "create-list watch-churn")
#      OBJECTS      (default 10000): ConfigMaps per run
#      WATCHERS     (25), VALUE_BYTES (1024), LISTS (200: full lists in create-list),
#      PAGE_SIZE    (500), RUN_TIMEOUT (15m: bound on each run of the load)
#      MEM_BIN      (the mem_etcd binary; else this tree's release build), MEM_ARGS (extra flags)
#      ETCD_BIN, KUBE_APISERVER_BIN (else built and cached by tests/peers/install_*.sh)
#      K8S_LOAD_BIN (else benches/k8s_load built and cached in ~/.cache/mem_etcd/k8s_load/)
#      APISERVER_ARGS (extra kube-apiserver flags), RESULTS (/tmp/k8s_load-results.jsonl),
#      LOG_DIR (/tmp/k8s_load-logs: each run's kube-apiserver and datastore logs)
#      STRICT=1 (a run fails when a request failed, a list was incomplete or a watch event was
#      missing, unexpected, duplicated or out of order: tests/run.sh's check)
# The load client runs on the same cores as the servers; its CPU seconds are in the table too.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

BACKENDS=${BACKENDS:-mem_etcd etcd}
CONCURRENCY=${CONCURRENCY:-10 50 200}
PROFILES=${PROFILES:-create-list watch-churn}
OBJECTS=${OBJECTS:-10000}
WATCHERS=${WATCHERS:-25}
VALUE_BYTES=${VALUE_BYTES:-1024}
LISTS=${LISTS:-200}
PAGE_SIZE=${PAGE_SIZE:-500}
RUN_TIMEOUT=${RUN_TIMEOUT:-15m}
RESULTS=${RESULTS:-/tmp/k8s_load-results.jsonl}
LOG_DIR=${LOG_DIR:-/tmp/k8s_load-logs}
DS_PORT=23891      # member i: client port DS_PORT + 2i, peer port DS_PORT + 2i + 1
API_PORT=26443

log() { echo "[k8s_load $(date +%H:%M:%S)] $*" >&2; }

# The load tool, built once per version of its sources.
if [ -z "${K8S_LOAD_BIN:-}" ]; then
  src=$(cat benches/k8s_load/go.mod benches/k8s_load/go.sum benches/k8s_load/*.go | sha256sum | cut -c1-16)
  K8S_LOAD_BIN=$HOME/.cache/mem_etcd/k8s_load/$src/k8s_load
  if [ ! -x "$K8S_LOAD_BIN" ]; then
    log "building benches/k8s_load (client-go; a minute or two the first time)"
    mkdir -p "$(dirname "$K8S_LOAD_BIN")"
    (cd benches/k8s_load && GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
      go build -trimpath -o "$K8S_LOAD_BIN.tmp" .)
    mv "$K8S_LOAD_BIN.tmp" "$K8S_LOAD_BIN"
  fi
fi
TOOL=$K8S_LOAD_BIN
ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
KUBE_APISERVER_BIN=${KUBE_APISERVER_BIN:-$(tests/peers/install_k8s.sh | tail -1)/kube-apiserver}
if [[ " $BACKENDS " == *" mem_etcd"* ]] && [ -z "${MEM_BIN:-}" ]; then
  cargo build --release --quiet
fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
read -ra MEM_EXTRA <<<"${MEM_ARGS:-}"
read -ra APISERVER_EXTRA <<<"${APISERVER_ARGS:-}"

TMP=$(mktemp -d /dev/shm/k8s_load.XXXXXX)
DS_PIDS=() API_PID=''
# SIGTERM, then SIGKILL if the process is still there after 20 s.
stop_pids() {
  local p i
  kill "$@" 2>/dev/null || true
  for p in "$@"; do
    for i in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    [ "$i" -lt 200 ] || { log "pid $p ignored SIGTERM for 20 s: SIGKILL"; kill -9 "$p" 2>/dev/null || true; }
    wait "$p" 2>/dev/null || true
  done
}

cleanup() {
  if [ -n "$API_PID" ]; then stop_pids "$API_PID"; fi
  if [ ${#DS_PIDS[@]} -gt 0 ]; then stop_pids "${DS_PIDS[@]}"; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
: >"$RESULTS"
mkdir -p "$LOG_DIR"

client_url() { echo "http://127.0.0.1:$((DS_PORT + 2 * $1))"; }
peer_url() { echo "http://127.0.0.1:$((DS_PORT + 2 * $1 + 1))"; }

# Starts the datastore BACKEND: sets DS_PIDS and ETCD_SERVERS (kube-apiserver's --etcd-servers).
start_backend() {
  local kind members=1 i initial='' flags servers=''
  case $1 in
    mem_etcd|etcd) kind=$1 ;;
    mem_etcd3|etcd3) kind=${1%3} members=3 ;;
    *) log "unknown backend '$1' (mem_etcd, etcd, mem_etcd3, etcd3)"; exit 2 ;;
  esac
  DS_PIDS=()
  for i in $(seq 0 $((members - 1))); do initial+="m$i=$(peer_url "$i"),"; done
  for i in $(seq 0 $((members - 1))); do
    flags=(--name "m$i" --data-dir "$TMP/data$i" --listen-client-urls "$(client_url "$i")"
      --advertise-client-urls "$(client_url "$i")" --listen-peer-urls "$(peer_url "$i")"
      --initial-advertise-peer-urls "$(peer_url "$i")" --initial-cluster "${initial%,}"
      --initial-cluster-token "k8s-load-$$" --initial-cluster-state new
      --quota-backend-bytes 8589934592 --log-level warn)
    case $kind in
      mem_etcd) "$MEM" "${flags[@]}" "${MEM_EXTRA[@]}" 2>"$TMP/ds$i.log" & ;;
      etcd) "$ETCD_BIN" "${flags[@]}" 2>"$TMP/ds$i.log" & ;;
    esac
    DS_PIDS+=($!)
    servers+="$(client_url "$i"),"
  done
  ETCD_SERVERS=${servers%,}
  for _ in $(seq 300); do
    "$ETCDCTL" --endpoints "$ETCD_SERVERS" --command-timeout 1s endpoint health >/dev/null 2>&1 && return
    sleep 0.1
  done
  log "$1 did not start"; tail -5 "$TMP"/ds*.log >&2 || true; exit 1
}

# Starts kube-apiserver on ETCD_SERVERS with what tests/it/k8s_e2e.rs gives it (a
# service-account key, a token in system:masters, AlwaysAllow, self-signed serving
# certificates), and waits until /readyz is ok. The watch cache and compaction keep their
# defaults.
start_apiserver() {
  local dir=$TMP/apiserver
  mkdir -p "$dir"
  "$TOOL" init-apiserver -dir "$dir" -server "https://127.0.0.1:$API_PORT"
  "$KUBE_APISERVER_BIN" --etcd-servers="$ETCD_SERVERS" --storage-backend=etcd3 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT \
    --cert-dir="$dir/certs" --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
    --token-auth-file="$dir/tokens.csv" --authorization-mode=AlwaysAllow \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
    "${APISERVER_EXTRA[@]}" >"$dir/log" 2>&1 &
  API_PID=$!
  if ! "$TOOL" wait-ready -kubeconfig "$dir/kubeconfig" -pid "$API_PID" -timeout 120s; then
    tail -20 "$dir/log" >&2; exit 1
  fi
}

# kube-apiserver first: its graceful shutdown needs the datastore.
stop_all() {
  stop_pids "$API_PID"
  stop_pids "${DS_PIDS[@]}"
  API_PID='' DS_PIDS=()
  rm -rf "$TMP"/data* "$TMP/apiserver"
}

failed=0
for backend in $BACKENDS; do
  for profile in $PROFILES; do
    for clients in $CONCURRENCY; do
      log "$backend $profile clients=$clients objects=$OBJECTS"
      start_backend "$backend"
      start_apiserver
      if "$TOOL" --kubeconfig "$TMP/apiserver/kubeconfig" --profile "$profile" --clients "$clients" \
          --objects "$OBJECTS" --watchers "$WATCHERS" --value-bytes "$VALUE_BYTES" \
          --lists "$LISTS" --page-size "$PAGE_SIZE" --timeout "$RUN_TIMEOUT" --label "$backend" \
          --datastore-pids "${DS_PIDS[*]}" --apiserver-pids "$API_PID" ${STRICT:+--strict} \
          >"$TMP/out" 2>"$TMP/err"; then
        grep '^{' "$TMP/out" >>"$RESULTS"
        grep -v '^{' "$TMP/out" >&2
      else
        failed=$((failed + 1))
        log "FAILED: $backend $profile clients=$clients"; tail -20 "$TMP/err" >&2
        tail -20 "$TMP/apiserver/log" >&2
      fi
      cp "$TMP/apiserver/log" "$LOG_DIR/$backend-$profile-$clients.apiserver.log"
      for f in "$TMP"/ds*.log; do cp "$f" "$LOG_DIR/$backend-$profile-$clients.$(basename "$f")"; done
      stop_all
    done
  done
done

"$TOOL" table "$RESULTS"
echo
echo "($(nproc) cores; kube-apiserver $("$KUBE_APISERVER_BIN" --version | awk '{print $2}'); $OBJECTS ConfigMaps of $VALUE_BYTES bytes per run; $WATCHERS watchers; $LISTS lists of pages of $PAGE_SIZE; CPU seconds during the load, peak RSS over the process's life (fresh per run); JSON lines in $RESULTS)"
if [ "$failed" -gt 0 ]; then log "$failed run(s) failed"; exit 1; fi
