# shellcheck shell=bash
# Sourced by the benches that start a mem_etcd or etcd server (benches/compare_etcd.sh,
# benches/k8s_load.sh, benches/scale.sh): one function that starts a member alone or an
# N-member cluster on 127.0.0.1 with etcd's cluster flags and waits until it serves, one that
# starts (or restarts, or adds) a single member, and kube-apiserver and its load tool for the
# benches that run Kubernetes.
#
# Member i listens for clients on port BASE + 2i and for peers on BASE + 2i + 1. Its data
# directory is DIR/KINDi and its log (stderr) DIR/KINDi.log.
#
# Needs: MEM (the mem_etcd binary) for mem_etcd, ETCD_BIN for etcd, ETCDCTL for the health check;
# MEM_EXTRA (array, may be empty): extra mem_etcd flags. The caller runs from the repository's
# top directory.

cluster_client_url() { echo "http://127.0.0.1:$(($1 + 2 * $2))"; } # BASE I
cluster_peer_url() { echo "http://127.0.0.1:$(($1 + 2 * $2 + 1))"; }

# cluster_start KIND MEMBERS DIR BASE TOKEN
# KIND is mem_etcd or etcd (or floor or tonic, a member alone). Sets CLUSTER_PIDS (one per
# member), CLUSTER_URLS (the client URLs, comma-separated, as kube-apiserver's --etcd-servers
# takes them) and CLUSTER_ENDPOINTS (the
# same as host:port, as etcd's benchmark tool takes them). Returns 0 once every member answers
# a health check (a linearizable read: a cluster has elected a leader); else prints the tail
# of the members' logs and returns 1 after 30 s, leaving the members running (CLUSTER_PIDS) for
# the caller to stop.
cluster_start() {
  local kind=$1 members=$2 dir=$3 base=$4 token=$5 i initial=''
  CLUSTER_PIDS=() CLUSTER_URLS='' CLUSTER_ENDPOINTS=''
  for i in $(seq 0 $((members - 1))); do initial+="m$i=$(cluster_peer_url "$base" "$i"),"; done
  for i in $(seq 0 $((members - 1))); do
    cluster_member "$kind" "$i" "${initial%,}" "$dir" "$base" "$token" new || return 2
    CLUSTER_PIDS+=("$MEMBER_PID")
    CLUSTER_URLS+="$(cluster_client_url "$base" "$i"),"
    CLUSTER_ENDPOINTS+="127.0.0.1:$((base + 2 * i)),"
  done
  CLUSTER_URLS=${CLUSTER_URLS%,} CLUSTER_ENDPOINTS=${CLUSTER_ENDPOINTS%,}
  local end=$((SECONDS + 30))
  # tonic's floor serves KV alone, so a read stands for the health check (which asks for alarms).
  local check=(endpoint health)
  [ "$kind" != tonic ] || check=(get health)
  while [ "$SECONDS" -lt "$end" ]; do
    "$ETCDCTL" --endpoints "$CLUSTER_URLS" --dial-timeout 1s --command-timeout 1s "${check[@]}" \
      >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$kind did not start within 30 s ($members member(s) on 127.0.0.1:$base..)" >&2
  tail -5 "$dir/$kind"[0-9]*.log >&2 || true
  return 1
}

# cluster_member KIND I INITIAL_CLUSTER DIR BASE TOKEN STATE
# Starts member I (named mI) in the background with etcd's cluster flags and sets MEMBER_PID;
# does not wait. STATE is new or existing (a member added to a running cluster). Started
# again with the same arguments, it restarts the member on its data directory (both etcd and
# mem_etcd then ignore the initial-cluster flags). CLUSTER_QUOTA: --quota-backend-bytes (8 GiB).
# CLUSTER_CPUS: a CPU list (taskset -c) the member runs on; both servers size their worker
# threads from it (Go's GOMAXPROCS, tokio's workers).
cluster_member() {
  local kind=$1 i=$2 initial=$3 dir=$4 base=$5 token=$6 state=$7 flags pin=()
  [ -z "${CLUSTER_CPUS:-}" ] || pin=(taskset -c "$CLUSTER_CPUS")
  flags=(--name "m$i" --data-dir "$dir/$kind$i" --listen-client-urls "$(cluster_client_url "$base" "$i")"
    --advertise-client-urls "$(cluster_client_url "$base" "$i")"
    --listen-peer-urls "$(cluster_peer_url "$base" "$i")"
    --initial-advertise-peer-urls "$(cluster_peer_url "$base" "$i")" --initial-cluster "$initial"
    --initial-cluster-token "$token" --initial-cluster-state "$state"
    --quota-backend-bytes "${CLUSTER_QUOTA:-8589934592}" --log-level warn)
  case $kind in
    mem_etcd) ${pin[@]+"${pin[@]}"} "$MEM" "${flags[@]}" ${MEM_EXTRA[@]+"${MEM_EXTRA[@]}"} 2>>"$dir/$kind$i.log" & ;;
    etcd) ${pin[@]+"${pin[@]}"} "$ETCD_BIN" "${flags[@]}" 2>>"$dir/$kind$i.log" & ;;
    # The floor (benches/README.md, "The floor"): mem_etcd's stack with a KV that touches no
    # store, and the same KV on tonic's defaults.
    floor) ${pin[@]+"${pin[@]}"} "$MEM" bench-floor "${flags[@]}" ${MEM_EXTRA[@]+"${MEM_EXTRA[@]}"} 2>>"$dir/$kind$i.log" & ;;
    tonic) ${pin[@]+"${pin[@]}"} "$MEM" bench-floor-tonic "${flags[@]}" 2>>"$dir/$kind$i.log" & ;;
    *) echo "cluster_member: unknown kind '$kind' (mem_etcd, etcd, floor or tonic)" >&2; return 2 ;;
  esac
  MEMBER_PID=$!
}

# stop_pids PID...: SIGTERM, then SIGKILL if a process is still there after 20 s.
stop_pids() {
  local p i
  kill "$@" 2>/dev/null || true
  for p in "$@"; do
    for i in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    [ "$i" -lt 200 ] || { echo "pid $p ignored SIGTERM for 20 s: SIGKILL" >&2; kill -9 "$p" 2>/dev/null || true; }
    wait "$p" 2>/dev/null || true
  done
}

# k8s_load_tool: sets TOOL to the benches/k8s_load binary (K8S_LOAD_BIN if given), built once
# per version of its sources and cached in ~/.cache/mem_etcd/k8s_load/, with the Go that
# tests/peers/install_go.sh finds or fetches.
k8s_load_tool() {
  if [ -z "${K8S_LOAD_BIN:-}" ]; then
    local src go_dir
    src=$(cat benches/k8s_load/go.mod benches/k8s_load/go.sum benches/k8s_load/*.go | sha256sum | cut -c1-16)
    K8S_LOAD_BIN=$HOME/.cache/mem_etcd/k8s_load/$src/k8s_load
    if [ ! -x "$K8S_LOAD_BIN" ]; then
      echo "building benches/k8s_load (client-go; a minute or two the first time)" >&2
      mkdir -p "$(dirname "$K8S_LOAD_BIN")"
      go_dir=$(tests/peers/install_go.sh | tail -n 1) ||
        { echo "no Go >= 1.26 to build benches/k8s_load (tests/peers/install_go.sh)" >&2; return 1; }
      ([ "$(command -v go)" = "$go_dir/go" ] || PATH=$go_dir:$PATH
       cd benches/k8s_load && GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
         go build -trimpath -o "$K8S_LOAD_BIN.tmp" .)
      mv "$K8S_LOAD_BIN.tmp" "$K8S_LOAD_BIN"
    fi
  fi
  TOOL=$K8S_LOAD_BIN
}

# start_apiserver DIR PORT: kube-apiserver (KUBE_APISERVER_BIN) on ETCD_SERVERS with what
# tests/it/kubernetes/k8s_e2e.rs gives it (a service-account key, a token in system:masters, AlwaysAllow,
# self-signed serving certificates) and APISERVER_EXTRA (array, may be empty); its files and
# log in DIR, its kubeconfig DIR/kubeconfig. Sets API_PID and waits until /readyz is ok.
start_apiserver() {
  local dir=$1 port=$2
  mkdir -p "$dir"
  "$TOOL" init-apiserver -dir "$dir" -server "https://127.0.0.1:$port"
  "$KUBE_APISERVER_BIN" --etcd-servers="$ETCD_SERVERS" --storage-backend=etcd3 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --cert-dir="$dir/certs" --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$dir/sa.key" --service-account-signing-key-file="$dir/sa.key" \
    --token-auth-file="$dir/tokens.csv" --authorization-mode=AlwaysAllow \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
    ${APISERVER_EXTRA[@]+"${APISERVER_EXTRA[@]}"} >"$dir/log" 2>&1 &
  API_PID=$!
  if ! "$TOOL" wait-ready -kubeconfig "$dir/kubeconfig" -pid "$API_PID" -timeout 120s; then
    tail -20 "$dir/log" >&2; return 1
  fi
}
