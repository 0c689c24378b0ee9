#!/usr/bin/env bash
# Side-by-side load test: etcd's own `benchmark` tool against mem_etcd and a real etcd 3.6
# (data on tmpfs), back to back on this machine, with the same flags. Prints requests/s, the
# server's CPU time per request (user+system of the server processes / requests) and the ratio.
#
# Usage: benches/compare_etcd.sh [put|txn-put|range|watch|memory|snapshot|idle|floor|serial|all]
#        (default all: all but memory, snapshot, idle, floor and serial)
# memory: TOTAL distinct keys put once each (KEY_SIZE-byte keys, default 8, VAL_SIZE-byte values,
#        default 1024); its RSS column, read two seconds after the load, is what a server holds
#        for them (with MEMBERS=1 and MEMBERS=3, a cluster member's memory against a member
#        alone's), and a line after the table gives each server's RSS growth per key, also as a
#        multiple of the key and value bytes (`TOTAL=1000000 KEY_SIZE=16 VAL_SIZE=300`: a
#        million small objects such as node Leases), and the same after the servers are
#        stopped and started again on their data directories.
# snapshot: TOTAL keys loaded as for memory, then `etcdctl snapshot save` of them to tmpfs, timed;
#        its own table: seconds to save, the servers' CPU seconds meanwhile, how far the largest
#        member's peak RSS rose above its RSS before the save, and the file's size (TOTAL=1000000
#        is 1 GiB of values).
# idle: no load at all: one put, then the servers' CPU over IDLE_SECONDS (default 30) as a
#        percentage of one core, and their RSS summed at its end (a cluster's fixed cost: its
#        heartbeats, probes, timers); its own table.
# floor: range and put (as above) against four servers: mem_etcd, etcd, and two that answer
#        every Range and Put at once without a store: `mem_etcd bench-floor` (mem_etcd's own
#        listener, HTTP/2 and tonic settings, layers and runtime: the floor of its stack) and
#        `mem_etcd bench-floor-tonic` (tonic's defaults); each server's CPU per request also as
#        a multiple of the floor's. A member alone only.
# serial: mem_etcd alone: TOTAL puts (as put), then TOTAL Lease renewals from etcd-lease-flood
#        (kube-apiserver's update Txn, one hot resource) from its 100 workers and again from
#        WIDE_WORKERS (400); for each, the time per write inside the sections that pass writes
#        one at a time (the in-order publisher, the WAL writer, the written resource's
#        partition lock), read from /metrics, and the write rate each would cap the server at
#        whatever its core count. The two Lease loads write batches of different sizes: from
#        them, the WAL writer's cost per pass and per revision, and its ceiling as batches grow
#        with the rate (1 / the cost per revision). FLOOD_BIN: etcd-lease-flood (else next to
#        MEM).
# env: TOTAL (requests per run, default 100000), CLIENTS (100), CONNS (10)
#      MEMBERS (1: one server each; 3 or 5: a cluster of that many members on 127.0.0.1, started
#      with etcd's cluster flags, every member in the benchmark's --endpoints, which spreads its
#      connections over them; server CPU summed over the members)
#      ETCD_BIN, BENCHMARK_BIN (else built/cached by tests/peers/*.sh)
#      MEM_BIN (the mem_etcd binary to measure, e.g. an earlier build; else this tree's release
#      build)
#      RATE (put and txn-put: at most this many requests/s, as `benchmark --rate`; unset: as
#      fast as the clients go). A fixed rate well below either server's ceiling is Kubernetes'
#      pace: requests come a few at a time, so every message's fixed cost counts, not batching.
#      MEM_ARGS (extra mem_etcd flags, e.g. "--worker-threads 1"), ROUNDS (1: runs per server,
#      alternating mem_etcd and etcd; the medians are reported)
#      PIN (unset: client and servers share every core; e.g. "0:1": the servers run on CPU list
#      0 and the benchmark client on CPU list 1, so the client's CPU no longer takes the servers'
#      cores, as a client on another machine would not)
# The client's CPU per request is printed too: on a small machine the benchmark client shares
# the cores with the server, so requests/s is bounded by client + server CPU per request.
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
TOTAL=${TOTAL:-100000}
CLIENTS=${CLIENTS:-100}
CONNS=${CONNS:-10}
ETCD_BIN=${ETCD_BIN:-$(tests/peers/install_etcd.sh | tail -1)/etcd}
BENCH=${BENCHMARK_BIN:-$(tests/peers/install_benchmark.sh | tail -1)}
if [ -z "${MEM_BIN:-}" ]; then cargo build --release --quiet; fi
MEM=${MEM_BIN:-${CARGO_TARGET_DIR:-target}/release/mem_etcd}
PORT=23791
TMP=$(mktemp -d /dev/shm/compare.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

MEMBERS=${MEMBERS:-1}
CLIENT_PIN=()
if [ -n "${PIN:-}" ]; then
  export CLUSTER_CPUS=${PIN%%:*}
  CLIENT_PIN=(taskset -c "${PIN#*:}")
fi
ETCDCTL=$(dirname "$ETCD_BIN")/etcdctl

# The largest resident set among the servers, in KiB.
max_rss_kb() { local p; for p in "$@"; do awk '$1 == "VmRSS:" {print $2}' "/proc/$p/status"; done | sort -n | tail -1; }

cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }

# shellcheck source=benches/cluster.sh
. benches/cluster.sh
read -ra MEM_EXTRA <<<"${MEM_ARGS:-}"

start() { # KIND: starts MEMBERS members (one server when 1), waits until they serve
  cluster_start "$1" "$MEMBERS" "$TMP" "$PORT" "compare-$$" || exit 1
  SERVER_PIDS=("${CLUSTER_PIDS[@]}") ENDPOINTS=$CLUSTER_ENDPOINTS
}

stop() {
  kill "${SERVER_PIDS[@]}"; wait "${SERVER_PIDS[@]}" 2>/dev/null || true
  rm -rf "$TMP"/etcd[0-9]* "$TMP"/mem_etcd[0-9]*
}

# Prints "requests/s cpu_us_per_request" for one workload against a fresh server.
run() { # KIND WORKLOAD
  start "$1"
  local common=(--endpoints "$ENDPOINTS" --clients "$CLIENTS" --conns "$CONNS")
  case $2 in
    put) args=(put --key-size 48 --val-size 1024 --key-space-size 100000 --sequential-keys=false --total "$TOTAL" ${RATE:+--rate "$RATE"}) ;;
    txn-put) args=(txn-put --key-size 48 --val-size 1024 --key-space-size 100000 --total "$TOTAL" ${RATE:+--rate "$RATE"}) ;;
    range)
      ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$BENCH" --endpoints "$ENDPOINTS" --clients 10 --conns 10 put --key-size 48 --val-size 1024 \
        --key-space-size 1000 --sequential-keys --total 1000 >/dev/null 2>&1
      args=(range foo --consistency l --total "$TOTAL") ;;
    watch) args=(watch --streams 10 --watch-per-stream 100 --watched-key-total 100 --put-total "$TOTAL" --put-rate 0) ;;
    memory | snapshot) args=(put --key-size "${KEY_SIZE:-8}" --val-size "${VAL_SIZE:-1024}" --key-space-size "$TOTAL" --sequential-keys --total "$TOTAL") ;;
  esac
  local c0 c1 out client kb0
  kb0=$(max_rss_kb "${SERVER_PIDS[@]}")
  c0=$(cpu_ticks "${SERVER_PIDS[@]}")
  out=$(/usr/bin/time -f '%U %S' -o "$TMP/client.time" ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$BENCH" "${common[@]}" "${args[@]}" 2>&1)
  c1=$(cpu_ticks "${SERVER_PIDS[@]}")
  # The allocator returns freed memory after a second.
  if [ "$2" = memory ]; then sleep 2; fi
  if [ "$2" = snapshot ]; then
    # Stopped before the figures are printed: the next server takes the same ports.
    out=$(save_snapshot "$1") && stop && echo "$out"
    return
  fi
  local kb1 rss per_key restarted=-
  kb1=$(max_rss_kb "${SERVER_PIDS[@]}")
  rss=$(awk -v k="$kb1" 'BEGIN{printf "%.0f", k / 1024}')
  per_key=$(( (kb1 - kb0) * 1024 / TOTAL ))
  if [ "$2" = memory ]; then
    # The same keys after a restart: read back from the data directory, with no requests'
    # buffers among them.
    kill "${SERVER_PIDS[@]}"; wait "${SERVER_PIDS[@]}" 2>/dev/null || true
    start "$1"
    sleep 2
    restarted=$(( ($(max_rss_kb "${SERVER_PIDS[@]}") - kb0) * 1024 / TOTAL ))
  fi
  client=$(awk -v n="$TOTAL" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$TMP/client.time")
  stop
  local rps
  rps=$(grep -m1 -oE 'Requests/sec:\s*[0-9.]+' <<<"$out" | grep -oE '[0-9.]+$' || true)
  [ -n "$rps" ] || rps=$(grep -m1 -oE '[0-9.]+ (events|requests)/s' <<<"$out" | grep -oE '^[0-9.]+' || echo 0)
  local ticks=$((c1 - c0)) hz
  hz=$(getconf CLK_TCK)
  echo "$rps $(awk -v t="$ticks" -v hz="$hz" -v n="$TOTAL" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}') $client $rss $per_key $restarted"
  echo "$out" >"$TMP/$1-$2.out"
  cp "$TMP/$1-$2.out" "/tmp/compare-$1-$2.out"
}

# Prints "seconds cpu_seconds peak_rise_mib file_mib" for an `etcdctl snapshot save` of what
# the servers hold (through the first member, as a user saves from one endpoint).
save_snapshot() { # KIND
  local p i c0 c1 t0 t1 rise=0 hwm rss0=()
  sleep 2
  for p in "${SERVER_PIDS[@]}"; do
    # 5: reset the peak RSS (VmHWM) to the current RSS, so the peak seen after is the save's.
    echo 5 >"/proc/$p/clear_refs"
    rss0+=("$(awk '$1 == "VmRSS:" {print $2}' "/proc/$p/status")")
  done
  c0=$(cpu_ticks "${SERVER_PIDS[@]}") t0=$(date +%s.%N)
  "$ETCDCTL" --endpoints "${ENDPOINTS%%,*}" --command-timeout 10m snapshot save "$TMP/$1.snapshot.db" >/dev/null 2>&1 ||
    { echo "snapshot save from $1 failed" >&2; return 1; }
  t1=$(date +%s.%N) c1=$(cpu_ticks "${SERVER_PIDS[@]}")
  for i in "${!SERVER_PIDS[@]}"; do
    hwm=$(awk '$1 == "VmHWM:" {print $2}' "/proc/${SERVER_PIDS[$i]}/status")
    rise=$(awk -v r="$rise" -v h="$hwm" -v s="${rss0[$i]}" 'BEGIN{d = h - s; print (d > r ? d : r)}')
  done
  awk -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v r="$rise" \
    -v size="$(stat -c %s "$TMP/$1.snapshot.db")" \
    'BEGIN{printf "%.2f %.2f %.0f %.0f\n", t1 - t0, c / hz, r / 1024, size / 1048576}'
  rm -f "$TMP/$1.snapshot.db"
}

# Prints "cpu_percent_of_a_core rss_mib_summed" for IDLE_SECONDS of a fresh server doing nothing
# after one put.
idle() { # KIND
  start "$1"
  "$ETCDCTL" --endpoints "${ENDPOINTS%%,*}" put idle-probe x >/dev/null
  sleep 2
  local c0 c1 t0 t1 p rss=0
  c0=$(cpu_ticks "${SERVER_PIDS[@]}") t0=$(date +%s.%N)
  sleep "${IDLE_SECONDS:-30}"
  c1=$(cpu_ticks "${SERVER_PIDS[@]}") t1=$(date +%s.%N)
  for p in "${SERVER_PIDS[@]}"; do rss=$((rss + $(awk '$1 == "VmRSS:" {print $2}' "/proc/$p/status"))); done
  stop
  awk -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" -v r="$rss" \
    'BEGIN{printf "%.2f %.0f\n", c / hz / (t1 - t0) * 100, r / 1024}'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

workloads=(put txn-put range watch)
[ "$WHAT" = all ] || workloads=("$WHAT")
ROUNDS=${ROUNDS:-1}
if [ "$WHAT" = idle ]; then
  printf '%-9s %18s %18s\n' server "CPU (% of a core)" "RSS summed (MiB)"
  for _ in $(seq "$ROUNDS"); do
    for kind in mem_etcd etcd; do
      read -r a b < <(idle "$kind")
      printf '%-9s %18s %18s\n' "$kind" "$a" "$b"
    done
  done
  echo "($(nproc) cores; $MEMBERS member(s) per server, CPU and RSS summed; ${IDLE_SECONDS:-30} s after one put)"
  exit 0
fi
if [ "$WHAT" = snapshot ]; then
  printf '%-9s %12s %12s %16s %10s\n' server "save (s)" "server CPU (s)" "peak rise (MiB)" "file (MiB)"
  for _ in $(seq "$ROUNDS"); do
    for kind in mem_etcd etcd; do
      read -r a b c d < <(run "$kind" snapshot)
      printf '%-9s %12s %12s %16s %10s\n' "$kind" "$a" "$b" "$c" "$d"
    done
  done
  echo "($(nproc) cores; $MEMBERS member(s) per server; $TOTAL keys of 1 KiB; saved through the first member to tmpfs)"
  exit 0
fi
if [ "$WHAT" = serial ]; then
  [ "$MEMBERS" = 1 ] || { echo "serial: a member alone only (MEMBERS=1)" >&2; exit 2; }
  FLOOD=${FLOOD_BIN:-$(dirname "$MEM")/etcd-lease-flood}
  # One Prometheus sample: metric{label="value"} from the member's /metrics.
  sample() { curl -s "$(cluster_client_url "$PORT" 0)/metrics" | awk -v m="$1{$2=\"$3\"}" '$1 == m {print $2}'; }
  printf '%-11s %-24s %10s %16s %12s %18s\n' load section "per write" "ceiling (1/x)" "per pass" "writes/s measured"
  WIDE=${WIDE_WORKERS:-400}
  writer=()
  for load in put lease-flood "lease-flood-$WIDE"; do
    start mem_etcd
    if [ "$load" = put ]; then
      out=$(${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$BENCH" --endpoints "$ENDPOINTS" --clients "$CLIENTS" --conns "$CONNS" put \
        --key-size 48 --val-size 1024 --key-space-size 100000 --sequential-keys=false --total "$TOTAL" 2>&1)
      rps=$(grep -m1 -oE 'Requests/sec:\s*[0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
      part=''
    else
      workers=100
      [ "$load" = lease-flood ] || workers=$WIDE
      out=$(${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$FLOOD" --endpoints "$ENDPOINTS" --total "$TOTAL" --workers "$workers" 2>&1 | tail -1)
      rps=$(grep -oE '[0-9.]+ writes/s' <<<"$out" | grep -oE '^[0-9.]+')
      part=/registry/leases/
    fi
    for section in publisher wal_writer "partition $part"; do
      if [ "${section%% *}" = partition ]; then
        secs=$(sample mem_etcd_partition_lock_seconds_total prefix "$part")
        n=$(sample mem_etcd_partition_locks_total prefix "$part")
        passes=$n
        name="lock ${part:-default}"
      else
        secs=$(sample mem_etcd_serial_seconds_total section "$section")
        n=$(sample mem_etcd_serial_revisions_total section "$section")
        passes=$(sample mem_etcd_serial_passes_total section "$section")
        name=$section
        [ "$section" != wal_writer ] || [ "$load" = put ] || writer+=("$secs $n $passes")
      fi
      awk -v l="$load" -v s="$name" -v t="$secs" -v n="$n" -v p="$passes" -v r="$rps" \
        'BEGIN{u = t / n * 1e6; printf "%-11s %-24s %7.2f µs %14.0f/s %12.1f %18.0f\n", l, s, u, 1e6 / u, n / p, r}'
    done
    stop
  done
  # A pass of n revisions takes a + b*n: the two Lease loads give a and b. As the rate grows,
  # batches grow and a is shared by more revisions, so the writer keeps up until 1/b.
  printf '%s\n' "${writer[@]}" | awk '
    { t[NR] = $1 / $3 * 1e6; n[NR] = $2 / $3 }
    END {
      if (NR < 2 || n[2] == n[1]) exit
      b = (t[2] - t[1]) / (n[2] - n[1]); a = t[1] - b * n[1]
      printf "wal_writer, from the two lease-flood loads (%.1f and %.1f revisions per pass): %.2f µs per pass + %.3f µs per revision; ceiling as batches grow %s\n", n[1], n[2], a, b, (b > 0 ? sprintf("%.0f/s", 1e6 / b) : "none measured")
    }'
  echo "($(nproc) cores${PIN:+, server on CPUs ${PIN%%:*} and the client on ${PIN#*:}}; $TOTAL writes per load; put: $CLIENTS clients over $CONNS connections, 1 KiB values; lease-flood: its defaults (kube-apiserver's Txn on 10,000 node Leases; 100 workers over 10 connections), lease-flood-$WIDE the same from $WIDE workers; a section's ceiling: the most writes/s it could pass with the server on any number of cores, at the writes per pass measured)"
  exit 0
fi
if [ "$WHAT" = floor ]; then
  [ "$MEMBERS" = 1 ] || { echo "floor: a member alone only (MEMBERS=1)" >&2; exit 2; }
  kinds=(floor tonic mem_etcd etcd)
  printf '%-8s %-9s %12s %16s %18s %14s\n' workload server "req/s" "server cpu/req" "client cpu/req" "cpu / floor's"
  for w in range put; do
    declare -A rps=() cpu=() cl=()
    for _ in $(seq "$ROUNDS"); do
      for kind in "${kinds[@]}"; do
        read -r a b c _ < <(run "$kind" "$w"); rps[$kind]+="$a " cpu[$kind]+="$b " cl[$kind]+="$c "
      done
    done
    f=$(median <<<"${cpu[floor]}")
    for kind in "${kinds[@]}"; do
      c=$(median <<<"${cpu[$kind]}")
      printf '%-8s %-9s %12.0f %13s µs %15s µs %13s\n' "$w" "$kind" "$(median <<<"${rps[$kind]}")" "$c" \
        "$(median <<<"${cl[$kind]}")" "$(awk -v a="$c" -v b="$f" 'BEGIN{printf "%.2fx", a / b}')"
    done
  done
  echo "($(nproc) cores${PIN:+, servers on CPUs ${PIN%%:*} and the client on ${PIN#*:}}; $TOTAL requests per run; $CLIENTS clients over $CONNS connections; median of $ROUNDS run(s) per server, the servers alternating; floor: mem_etcd bench-floor, tonic: mem_etcd bench-floor-tonic)"
  exit 0
fi
printf '%-8s %14s %14s %7s %16s %16s %18s %18s %13s %13s\n' workload "mem_etcd req/s" "etcd req/s" ratio \
  "mem_etcd cpu/req" "etcd cpu/req" "client cpu (mem)" "client cpu (etcd)" "mem_etcd RSS" "etcd RSS"
for w in "${workloads[@]}"; do
  mr='' mc='' mk='' mm='' mp='' mq='' er='' ec='' ek='' em='' ep='' eq=''
  for _ in $(seq "$ROUNDS"); do
    read -r a b c d e f < <(run mem_etcd "$w"); mr+="$a " mc+="$b " mk+="$c " mm+="$d " mp+="$e " mq+="$f "
    read -r a b c d e f < <(run etcd "$w"); er+="$a " ec+="$b " ek+="$c " em+="$d " ep+="$e " eq+="$f "
  done
  m_rps=$(median <<<"$mr") m_cpu=$(median <<<"$mc") m_cl=$(median <<<"$mk") m_rss=$(median <<<"$mm")
  e_rps=$(median <<<"$er") e_cpu=$(median <<<"$ec") e_cl=$(median <<<"$ek") e_rss=$(median <<<"$em")
  ratio=$(awk -v a="$m_rps" -v b="$e_rps" 'BEGIN{ if (b > 0) printf "%.2fx", a / b; else print "-" }')
  printf '%-8s %14.0f %14.0f %7s %13s µs %13s µs %15s µs %15s µs %9s MiB %9s MiB\n' "$w" "$m_rps" "$e_rps" "$ratio" \
    "$m_cpu" "$e_cpu" "$m_cl" "$e_cl" "$m_rss" "$e_rss"
  if [ "$w" = memory ]; then
    raw=$((${KEY_SIZE:-8} + ${VAL_SIZE:-1024}))
    awk -v m="$(median <<<"$mp")" -v e="$(median <<<"$ep")" -v r="$raw" 'BEGIN{printf "memory per key (RSS growth / keys, the largest member): mem_etcd %d B (%.2fx the %d B of key and value), etcd %d B (%.2fx)\n", m, m / r, r, e, e / r}'
    awk -v m="$(median <<<"$mq")" -v e="$(median <<<"$eq")" -v r="$raw" 'BEGIN{printf "the same keys after a restart: mem_etcd %d B (%.2fx), etcd %d B (%.2fx)\n", m, m / r, e, e / r}'
  fi
done
echo "($(nproc) cores${PIN:+, servers on CPUs ${PIN%%:*} and the client on ${PIN#*:}}; $MEMBERS member(s) per server (RSS: the largest member's); $TOTAL requests per run${RATE:+ at $RATE/s}; $CLIENTS clients over $CONNS connections; median of $ROUNDS alternating run(s) per server; mem_etcd flags: --wal-mode buffered ${MEM_ARGS:-}; full outputs in /tmp/compare-*.out)"
