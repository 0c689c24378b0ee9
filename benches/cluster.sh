# shellcheck shell=bash
# Sourced by the benches that start a mem_etcd or etcd server (benches/compare_etcd.sh,
# benches/k8s_load.sh): one function that starts a member alone or an N-member cluster on
# 127.0.0.1 with etcd's cluster flags, and waits until it serves.
#
# Member i listens for clients on port BASE + 2i and for peers on BASE + 2i + 1. Its data
# directory is DIR/KINDi and its log (stderr) DIR/KINDi.log.
#
# Needs: MEM (the mem_etcd binary) for mem_etcd, ETCD_BIN for etcd, ETCDCTL for the health check;
# MEM_EXTRA (array, may be empty): extra mem_etcd flags.

cluster_client_url() { echo "http://127.0.0.1:$(($1 + 2 * $2))"; } # BASE I
cluster_peer_url() { echo "http://127.0.0.1:$(($1 + 2 * $2 + 1))"; }

# cluster_start KIND MEMBERS DIR BASE TOKEN
# KIND is mem_etcd or etcd. Sets CLUSTER_PIDS (one per member), CLUSTER_URLS (the client URLs,
# comma-separated, as kube-apiserver's --etcd-servers takes them) and CLUSTER_ENDPOINTS (the
# same as host:port, as etcd's benchmark tool takes them). Returns 0 once every member answers
# a health check (a linearizable read: a cluster has elected a leader); else prints the tail
# of the members' logs and returns 1 after 30 s, leaving the members running (CLUSTER_PIDS) for
# the caller to stop.
cluster_start() {
  local kind=$1 members=$2 dir=$3 base=$4 token=$5 i initial='' flags
  CLUSTER_PIDS=() CLUSTER_URLS='' CLUSTER_ENDPOINTS=''
  for i in $(seq 0 $((members - 1))); do initial+="m$i=$(cluster_peer_url "$base" "$i"),"; done
  for i in $(seq 0 $((members - 1))); do
    flags=(--name "m$i" --data-dir "$dir/$kind$i" --listen-client-urls "$(cluster_client_url "$base" "$i")"
      --advertise-client-urls "$(cluster_client_url "$base" "$i")"
      --listen-peer-urls "$(cluster_peer_url "$base" "$i")"
      --initial-advertise-peer-urls "$(cluster_peer_url "$base" "$i")" --initial-cluster "${initial%,}"
      --initial-cluster-token "$token" --initial-cluster-state new
      --quota-backend-bytes 8589934592 --log-level warn)
    case $kind in
      mem_etcd) "$MEM" "${flags[@]}" ${MEM_EXTRA[@]+"${MEM_EXTRA[@]}"} 2>"$dir/$kind$i.log" & ;;
      etcd) "$ETCD_BIN" "${flags[@]}" 2>"$dir/$kind$i.log" & ;;
      *) echo "cluster_start: unknown kind '$kind' (mem_etcd or etcd)" >&2; return 2 ;;
    esac
    CLUSTER_PIDS+=($!)
    CLUSTER_URLS+="$(cluster_client_url "$base" "$i"),"
    CLUSTER_ENDPOINTS+="127.0.0.1:$((base + 2 * i)),"
  done
  CLUSTER_URLS=${CLUSTER_URLS%,} CLUSTER_ENDPOINTS=${CLUSTER_ENDPOINTS%,}
  local end=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$end" ]; do
    "$ETCDCTL" --endpoints "$CLUSTER_URLS" --dial-timeout 1s --command-timeout 1s endpoint health \
      >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$kind did not start within 30 s ($members member(s) on 127.0.0.1:$base..)" >&2
  tail -5 "$dir/$kind"[0-9]*.log >&2 || true
  return 1
}
