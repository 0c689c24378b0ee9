#!/usr/bin/env bash
# Hosted control planes (issue 50): TENANTS Kubernetes control planes, each a kube-apiserver 1.36
# with --etcd-prefix=/tenant-I, on three datastores: one mem_etcd declaring each as a --tenant,
# one shared etcd 3.6 (Kamaji's model), one etcd 3.6 per tenant (k0smotron's). Two measures:
#   density: every control plane under benches/k8s_load.sh's density profile at once (ConfigMaps
#     and node Leases created, then every Lease renewed every DENSITY_RENEW, as kubelets do); the
#     datastore's CPU over the window after one renewal round and its RSS at the window's end,
#     per tenant (the datastore's total, all its processes, over TENANTS).
#   noisy: two control planes, B under the density profile (over a NOISY_WINDOW window), first
#     alone, then while A runs the watch-churn profile with NOISY_CLIENTS clients over
#     NOISY_OBJECTS ConfigMaps (the noisy neighbour, sized to outlast B's window); B's Lease renewal
#     (write) p99 and its slowest renewal both ways. On an etcd per tenant A and B share nothing
#     but the machine: its row is what the cores alone do to B, the floor for a shared store.
# The load clients run on the same cores as the servers. Prints two tables; JSON lines (one per
# control plane and run) in RESULTS.
#
# Usage: benches/tenants.sh
# env: TENANTS (4), STORES ("mem_etcd etcd etcds"), MEASURES ("density noisy")
#      DENSITY_CLIENTS (10), DENSITY_OBJECTS (1000), DENSITY_LEASES (100), DENSITY_RENEW (10s),
#      DENSITY_WINDOW (60s), VALUE_BYTES (1024): as in benches/k8s_load.sh, per control plane
#      NOISY_CLIENTS (50), NOISY_OBJECTS (40000), WATCHERS (25): A's watch-churn; NOISY_WINDOW
#      (20s): B's window
#      MEM_ARGS (extra mem_etcd arguments), MEM_BIN, ETCD_BIN, KUBE_APISERVER_BIN, K8S_LOAD_BIN, RESULTS (/tmp/tenants-results.jsonl),
#      LOG_DIR (/tmp/tenants-logs)
set -euo pipefail
cd "$(dirname "$0")/.."

TENANTS=${TENANTS:-4}
STORES=${STORES:-mem_etcd etcd etcds}
MEASURES=${MEASURES:-density noisy}
DENSITY_CLIENTS=${DENSITY_CLIENTS:-10}
DENSITY_OBJECTS=${DENSITY_OBJECTS:-1000}
DENSITY_LEASES=${DENSITY_LEASES:-100}
DENSITY_RENEW=${DENSITY_RENEW:-10s}
DENSITY_WINDOW=${DENSITY_WINDOW:-60s}
VALUE_BYTES=${VALUE_BYTES:-1024}
NOISY_CLIENTS=${NOISY_CLIENTS:-50}
NOISY_OBJECTS=${NOISY_OBJECTS:-40000}
NOISY_WINDOW=${NOISY_WINDOW:-20s}
WATCHERS=${WATCHERS:-25}
RESULTS=${RESULTS:-/tmp/tenants-results.jsonl}
LOG_DIR=${LOG_DIR:-/tmp/tenants-logs}
DS_PORT=24891  # datastore I (etcds): client port DS_PORT + 10 I
API_PORT=27443 # control plane I: API_PORT + I

log() { echo "[tenants $(date +%H:%M:%S)] $*" >&2; }

ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl
KUBE_APISERVER_BIN=${KUBE_APISERVER_BIN:-$(tests/peers/install_k8s.sh | tail -1)/kube-apiserver}
if [[ " $STORES " == *" mem_etcd "* ]] && [ -z "${MEM_BIN:-}" ]; then
  cargo build --release --quiet
fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
# shellcheck source=benches/cluster.sh
. benches/cluster.sh
k8s_load_tool

TMP=$(mktemp -d /dev/shm/tenants.XXXXXX)
DS_PIDS=() API_PIDS=()
stop_all() {
  if [ ${#API_PIDS[@]} -gt 0 ]; then stop_pids "${API_PIDS[@]}"; fi
  if [ ${#DS_PIDS[@]} -gt 0 ]; then stop_pids "${DS_PIDS[@]}"; fi
  API_PIDS=() DS_PIDS=()
  rm -rf "${TMP:?}"/*
}
trap 'stop_all; rm -rf "$TMP"' EXIT
: >"$RESULTS"
mkdir -p "$LOG_DIR"

# start_store STORE N: the datastore for N control planes; sets DS_PIDS and SERVERS[i], the
# --etcd-servers of control plane i.
start_store() {
  local store=$1 n=$2 i tenants=''
  SERVERS=()
  for i in $(seq 0 $((n - 1))); do tenants+="/tenant-$i,"; done
  case $store in
    mem_etcd)
      # shellcheck disable=SC2206 # MEM_ARGS: extra arguments, split on spaces
      MEM_EXTRA=(--tenant "${tenants%,}" ${MEM_ARGS:-})
      cluster_start mem_etcd 1 "$TMP" "$DS_PORT" "tenants-$$" || return 1
      DS_PIDS=("${CLUSTER_PIDS[@]}")
      for i in $(seq 0 $((n - 1))); do SERVERS+=("$CLUSTER_URLS"); done ;;
    etcd)
      cluster_start etcd 1 "$TMP" "$DS_PORT" "tenants-$$" || return 1
      DS_PIDS=("${CLUSTER_PIDS[@]}")
      for i in $(seq 0 $((n - 1))); do SERVERS+=("$CLUSTER_URLS"); done ;;
    etcds)
      for i in $(seq 0 $((n - 1))); do
        mkdir -p "$TMP/etcd-$i"
        cluster_start etcd 1 "$TMP/etcd-$i" $((DS_PORT + 10 * i)) "tenants-$$-$i" || return 1
        DS_PIDS+=("${CLUSTER_PIDS[@]}")
        SERVERS+=("$CLUSTER_URLS")
      done ;;
    *) log "unknown store '$store' (mem_etcd, etcd, etcds)"; exit 2 ;;
  esac
}

# start_control_planes N: kube-apiserver I on SERVERS[I] with --etcd-prefix=/tenant-I.
start_control_planes() {
  local i
  for i in $(seq 0 $(($1 - 1))); do
    APISERVER_EXTRA=(--etcd-prefix="/tenant-$i")
    ETCD_SERVERS=${SERVERS[$i]}
    start_apiserver "$TMP/apiserver-$i" $((API_PORT + i)) || return 1
    API_PIDS+=("$API_PID")
  done
}

# load I LABEL PROFILE [ARGS...]: the load tool against control plane I in the background;
# its JSON line goes to TMP/out-I.
load() {
  local i=$1 label=$2 profile=$3
  shift 3
  "$TOOL" --kubeconfig "$TMP/apiserver-$i/kubeconfig" --profile "$profile" --label "$label" \
    --value-bytes "$VALUE_BYTES" --datastore-pids "${DS_PIDS[*]}" \
    --apiserver-pids "${API_PIDS[$i]}" --timeout 15m "$@" >"$TMP/out-$i" 2>"$TMP/err-$i" &
  LOAD_PIDS+=($!)
}
# Waits for every load started.
wait_loads() {
  local p
  for p in "${LOAD_PIDS[@]}"; do wait "$p" || true; done
  LOAD_PIDS=()
}
LOAD_PIDS=()
density_args=(--clients "$DENSITY_CLIENTS" --objects "$DENSITY_OBJECTS" --leases "$DENSITY_LEASES"
  --renew-interval "$DENSITY_RENEW" --window "$DENSITY_WINDOW")

# collect MEASURE STORE N I...: each load's JSON line into RESULTS, tagged with the measure,
# the store, its N control planes and the plane I; 1 if one failed.
collect() {
  local measure=$1 store=$2 n=$3 i rc=0
  shift 3
  for i in "$@"; do
    if ! grep -q '^{' "$TMP/out-$i"; then
      log "FAILED: $measure $store control plane $i"; tail -5 "$TMP/err-$i" >&2; rc=1; continue
    fi
    grep '^{' "$TMP/out-$i" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
r.update(measure=sys.argv[1], store=sys.argv[2], tenants=int(sys.argv[3]), plane=int(sys.argv[4]))
print(json.dumps(r))' "$measure" "$store" "$n" "$i" >>"$RESULTS"
  done
  return "$rc"
}

keep_logs() {
  local f
  for f in "$TMP"/apiserver-*/log "$TMP"/*.log "$TMP"/*/*.log; do
    [ -f "$f" ] && cp "$f" "$LOG_DIR/$1-$(echo "${f#"$TMP"/}" | tr / -)"
  done
  return 0
}

failed=0
for measure in $MEASURES; do
  for store in $STORES; do
    case $measure in
      density)
        log "density: $store, $TENANTS control planes"
        if start_store "$store" "$TENANTS" && start_control_planes "$TENANTS"; then
          for i in $(seq 0 $((TENANTS - 1))); do load "$i" "$store" density "${density_args[@]}"; done
          wait_loads
          collect density "$store" "$TENANTS" $(seq 0 $((TENANTS - 1))) || failed=$((failed + 1))
        else
          log "FAILED: $store or its control planes did not start"; failed=$((failed + 1))
        fi
        keep_logs "density-$store"; stop_all ;;
      noisy)
        for with in alone neighbour; do
          log "noisy: $store, B $with"
          if start_store "$store" 2 && start_control_planes 2; then
            load 1 "$store-$with" density "${density_args[@]:0:8}" --window "$NOISY_WINDOW"
            if [ "$with" = neighbour ]; then
              load 0 "$store-A" watch-churn --clients "$NOISY_CLIENTS" --objects "$NOISY_OBJECTS" \
                --watchers "$WATCHERS"
            fi
            wait_loads
            collect "noisy-$with" "$store" 2 1 || failed=$((failed + 1))
            if [ "$with" = neighbour ]; then collect noisy-A "$store" 2 0 || failed=$((failed + 1)); fi
          else
            log "FAILED: $store or its control planes did not start"; failed=$((failed + 1))
          fi
          keep_logs "noisy-$with-$store"; stop_all
        done ;;
      *) log "unknown measure '$measure' (density, noisy)"; exit 2 ;;
    esac
  done
done

python3 - "$RESULTS" "$TENANTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
dens = [r for r in rows if r["measure"] == "density"]
if dens:
    print("| datastore (%s control planes) | CPU per tenant at rest | RSS per tenant | renewal p99 |" % sys.argv[2])
    print("|---|--:|--:|--:|")
    for store in dict.fromkeys(r["store"] for r in dens):
        rs = [r for r in dens if r["store"] == store]
        n = rs[0]["tenants"]
        cpu = sum(r["density"]["datastore_cpu_pct"] for r in rs) / len(rs) / n
        rss = sum(r["datastore"]["rss_mib"] for r in rs) / len(rs) / n
        p99 = max(r["density"]["renewals"]["p99_ms"] for r in rs)
        print("| %s | %.2f%% of a core | %.1f MiB | %.1f ms |" % (store, cpu, rss, p99))
    print()
noisy = [r for r in rows if r["measure"].startswith("noisy-")]
if noisy:
    print("| datastore | B's renewal p99 alone | with A under watch-churn | ratio | B's slowest alone / with A | A's writes/s |")
    print("|---|--:|--:|--:|--:|--:|")
    for store in dict.fromkeys(r["store"] for r in noisy):
        get = lambda m: next((r for r in noisy if r["store"] == store and r["measure"] == m), None)
        a, b = get("noisy-alone"), get("noisy-neighbour")
        if not a or not b:
            continue
        pa, pb = a["density"]["renewals"]["p99_ms"], b["density"]["renewals"]["p99_ms"]
        ma, mb = a["density"]["renewals"]["max_ms"], b["density"]["renewals"]["max_ms"]
        na = get("noisy-A")
        aw = "%.0f" % na["write"]["per_s"] if na else "-"
        print("| %s | %.1f ms | %.1f ms | %.2fx | %.1f / %.1f ms | %s |" % (store, pa, pb, pb / pa if pa else 0, ma, mb, aw))
EOF
echo "($(nproc) cores; kube-apiserver $("$KUBE_APISERVER_BIN" --version | awk '{print $2}'); per control plane: $DENSITY_OBJECTS ConfigMaps of $VALUE_BYTES bytes and $DENSITY_LEASES Leases by $DENSITY_CLIENTS clients, every Lease renewed every $DENSITY_RENEW, CPU over a $DENSITY_WINDOW window after one renewal round; noisy neighbour: watch-churn with $NOISY_CLIENTS clients over $NOISY_OBJECTS ConfigMaps, B's window $NOISY_WINDOW; JSON lines in $RESULTS)"
if [ "$failed" -gt 0 ]; then log "$failed run(s) failed"; exit 1; fi
