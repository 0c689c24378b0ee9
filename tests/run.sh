#!/usr/bin/env bash
# The project's test command: every test, against the real reference peers.
#
#   tests/run.sh [extra cargo test args...]     e.g. tests/run.sh --test it api::kv::
#
# 1. installs `protoc` if missing (etcd-client's build script needs it; the server does not),
#    and finds Go >= 1.26 (tests/peers/install_go.sh: the one on PATH or in /usr/local/go, else
#    go1.26.8 fetched once from the Go module proxy into ~/.cache/mem_etcd/go, with Debian's
#    golang-go, installed if no go is there, to download it; under a minute),
# 2. builds the reference etcd + etcdctl 3.6 from the Go module proxy with that Go (cached in
#    ~/.cache), unless ETCD_BIN and ETCDCTL_BIN already point at them, and kube-apiserver +
#    kubectl 1.36 for the end-to-end test the same way (about 10 minutes the first time), unless
#    KUBE_APISERVER_BIN and KUBECTL_BIN already point at them,
# 3. runs `cargo test --release` (unit tests in src/, the integration suite tests/it, doc tests),
#    then (on a full run) Kubernetes' own storage suites against mem_etcd (tests/k8s_storage)
#    and kube-apiserver under benches/k8s_load's two profiles at a small size (and its
#    watch-churn on a 3-member etcd that 3 mem_etcd members follow, cut over exact: FOLLOW=1),
#    benches/tenants.sh with two control planes, benches/scale.sh at 2,000 objects and
#    benches/follow_cutover.sh at 2,000 keys,
# 4. runs the benches once in test mode, so they never rot.
#
# Works from any directory, as root on a fresh Debian machine or as a user with sudo.
# A failing set-up step (1-2) stops the script at once. The test steps (3, 3b-3e, 4) all run even
# when an earlier one fails, and the script ends with one line per step (passed, FAILED, or
# left out and why) and a non-zero exit if any failed. Peers are required; only a local run with
# MEM_ETCD_SKIP_PEERS=1 (and CI not "true") may go on without them, and the peer tests then
# print loud SKIPPED lines.
#
# Environment: ETCD_BIN, ETCDCTL_BIN, KUBE_APISERVER_BIN, KUBECTL_BIN (use these peers),
# MEM_ETCD_SKIP_PEERS=1 (local only),
# MEM_ETCD_TEST_TARGET=etcd (run the suite against real etcd to check the expectations).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '\n[run.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# --- 1. protoc ------------------------------------------------------------------------------
if ! command -v protoc >/dev/null 2>&1; then
  log "installing protobuf-compiler (protoc)"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "protoc is missing and sudo is not available"
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler
  command -v protoc >/dev/null 2>&1 || die "protoc still missing after apt-get install"
fi
log "protoc: $(protoc --version)"

skip_ok=0
if [ "${MEM_ETCD_SKIP_PEERS:-}" = 1 ] && [ "${CI:-}" != true ]; then skip_ok=1; fi

# --- 1b. Go >= 1.26 (the peers, tests/k8s_storage and benches/k8s_load are built with it) -------
# First on PATH for every step below (the scripts they run find this one and use it).
if go_dir=$(tests/peers/install_go.sh | tail -n 1); then
  [ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH
  log "go: $(cd / && GOTOOLCHAIN=local go version) ($(command -v go))"
elif [ "$skip_ok" = 1 ]; then
  go_dir=
  log "!!!!!!!! WARNING: no Go >= 1.26 (tests/peers/install_go.sh failed); MEM_ETCD_SKIP_PEERS=1, so the peer tests will be SKIPPED !!!!!!!!"
else
  die "no Go >= 1.26: tests/peers/install_go.sh could neither find nor fetch it (MEM_ETCD_SKIP_PEERS=1 \
skips peer tests on a local run, never in CI)"
fi

# --- 2. reference peers ---------------------------------------------------------------------
if [ -n "${ETCD_BIN:-}" ] && [ -x "${ETCD_BIN}" ] && [ -n "${ETCDCTL_BIN:-}" ] && [ -x "${ETCDCTL_BIN}" ]; then
  log "peers from the environment: ETCD_BIN=$ETCD_BIN ETCDCTL_BIN=$ETCDCTL_BIN"
else
  log "building/locating the reference etcd peers (tests/peers/install_etcd.sh)"
  if peer_out=$(tests/peers/install_etcd.sh); then
    peer_dir=$(printf '%s\n' "$peer_out" | tail -n 1)
    export ETCD_BIN="$peer_dir/etcd" ETCDCTL_BIN="$peer_dir/etcdctl"
  elif [ "$skip_ok" = 1 ]; then
    log "!!!!!!!! WARNING: could not build the etcd peers; MEM_ETCD_SKIP_PEERS=1, so the peer tests will be SKIPPED !!!!!!!!"
  else
    die "could not build the etcd peers (see above, or set ETCD_BIN and ETCDCTL_BIN; \
MEM_ETCD_SKIP_PEERS=1 skips peer tests on a local run, never in CI)"
  fi
fi
if [ -n "${ETCD_BIN:-}" ]; then
  [ -x "$ETCD_BIN" ] && [ -x "$ETCDCTL_BIN" ] || die "peer binaries not executable: $ETCD_BIN $ETCDCTL_BIN"
  log "peers: $("$ETCD_BIN" --version | head -n 1); etcdctl $("$ETCDCTL_BIN" version | head -n 1)"
fi
if [ -n "${KUBE_APISERVER_BIN:-}" ] && [ -x "${KUBE_APISERVER_BIN}" ] && [ -n "${KUBECTL_BIN:-}" ] && [ -x "${KUBECTL_BIN}" ]; then
  log "kubernetes peers from the environment: KUBE_APISERVER_BIN=$KUBE_APISERVER_BIN KUBECTL_BIN=$KUBECTL_BIN"
else
  log "building/locating kube-apiserver and kubectl (tests/peers/install_k8s.sh; about 10 minutes the first time)"
  if k8s_out=$(tests/peers/install_k8s.sh); then
    k8s_dir=$(printf '%s\n' "$k8s_out" | tail -n 1)
    export KUBE_APISERVER_BIN="$k8s_dir/kube-apiserver" KUBECTL_BIN="$k8s_dir/kubectl"
  elif [ "$skip_ok" = 1 ]; then
    log "!!!!!!!! WARNING: could not build kube-apiserver/kubectl; MEM_ETCD_SKIP_PEERS=1, so the Kubernetes end-to-end tests will be SKIPPED !!!!!!!!"
  else
    die "could not build kube-apiserver and kubectl (see above, or set KUBE_APISERVER_BIN \
and KUBECTL_BIN; MEM_ETCD_SKIP_PEERS=1 skips peer tests on a local run, never in CI)"
  fi
fi
if [ -n "${KUBE_APISERVER_BIN:-}" ]; then
  [ -x "$KUBE_APISERVER_BIN" ] && [ -x "$KUBECTL_BIN" ] || die "kubernetes peer binaries not executable: $KUBE_APISERVER_BIN $KUBECTL_BIN"
  kubectl_version=$("$KUBECTL_BIN" version --client 2>&1) || die "$KUBECTL_BIN version --client failed: $kubectl_version"
  log "kubernetes peers: $("$KUBE_APISERVER_BIN" --version 2>&1); kubectl ${kubectl_version%%$'\n'*}"
fi

# --- 3. tests -------------------------------------------------------------------------------
# Every step below runs whatever happened before it; `results` says how each ended.
results=()
failed_steps=0
record() { # STEP STATUS
  results+=("$(printf '%-60s %s' "$1" "$2")")
  case "$2" in FAILED*) failed_steps=$((failed_steps + 1)) ;; esac
}

# The integration tests wait on timers, elections and peer processes far more than they
# compute: with one test per core the 2-core machine was 30% busy (tests/README.md), so they run
# two per core (at most 16 at once) unless RUST_TEST_THREADS says otherwise.
if [ -z "${RUST_TEST_THREADS:-}" ]; then
  cores=$(nproc 2>/dev/null || echo 2)
  threads=$((cores * 2))
  [ "$threads" -le 16 ] || threads=16
  export RUST_TEST_THREADS=$threads
fi
log "cargo test --release --no-fail-fast $* (RUST_TEST_THREADS=$RUST_TEST_THREADS)"
test_log=$(mktemp)
storage_log=$(mktemp)
trap 'rm -f "$test_log" "$storage_log"' EXIT
# A hung test would otherwise hold CI until its own limit, with no result for any step: bound
# the step (a full run takes about 15 minutes here), and name what was still running.
test_timeout=${TEST_TIMEOUT:-2400}
set +e
timeout --kill-after=30 "$test_timeout" cargo test --release --no-fail-fast "$@" 2>&1 | tee "$test_log"
test_rc=${PIPESTATUS[0]}
set -e
if [ "$test_rc" -eq 0 ]; then
  record "cargo test --release $*" passed
elif [ "$test_rc" -eq 124 ] || [ "$test_rc" -eq 137 ]; then
  record "cargo test --release $*" "FAILED (stopped after ${test_timeout} s; slow or hung: $(sed -n 's/^test \(.*\) has been running for over 60 seconds$/\1/p' "$test_log" | tr '\n' ' '))"
else
  record "cargo test --release $*" "FAILED (see the failures listed above)"
fi
# The totals over every test binary (unit, integration, doc), for a closing line.
passed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed; \([0-9][0-9]*\) failed.*/\1/p' "$test_log" | awk '{s+=$1} END {print s+0}')
failed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed; \([0-9][0-9]*\) failed.*/\2/p' "$test_log" | awk '{s+=$1} END {print s+0}')
# The failing tests by name, repeated at the end where they are easy to find.
# (cargo's list: a "failures:" line, the names indented by four spaces, a blank line.)
failing_tests=$(awk '/^failures:$/ {on = 1; next}
  on && /^    [^ ]+$/ {sub(/^ +/, ""); print; next}
  {on = 0}' "$test_log" | sort -u)

# --- 3b. Kubernetes' own storage suites (k8s.io/apiserver etcd3 and cacher) against mem_etcd ----
# Only on a full run: extra arguments select a subset of the cargo tests above.
storage_step="tests/k8s_storage/run.sh (Kubernetes' etcd3 and cacher storage suites)"
if [ "$#" -ne 0 ]; then
  record "$storage_step" "left out: arguments select a subset of the cargo tests"
elif [ ! -x target/release/mem_etcd ]; then
  record "$storage_step" "FAILED (no target/release/mem_etcd: the cargo build failed)"
else
  log "$storage_step"
  if MEM_ETCD_BIN="$PWD/target/release/mem_etcd" MEM_ETCD_STORAGE_TARGET=${MEM_ETCD_TEST_TARGET:-mem_etcd} \
      tests/k8s_storage/run.sh 2>&1 | tee "$storage_log"; then
    record "$storage_step" passed
  elif [ "$skip_ok" = 1 ] && [ -z "$go_dir" ]; then
    log "!!!!!!!! WARNING: no Go toolchain; MEM_ETCD_SKIP_PEERS=1, so the Kubernetes storage suites were SKIPPED !!!!!!!!"
    record "$storage_step" "SKIPPED (no Go toolchain; MEM_ETCD_SKIP_PEERS=1)"
  else
    record "$storage_step" FAILED
  fi
  # "<suite>: N passed, M failed, K skipped" lines count into the closing line.
  passed=$((passed + $(sed -n 's/^[a-z0-9]*: \([0-9][0-9]*\) passed, .*/\1/p' "$storage_log" | awk '{s+=$1} END {print s+0}')))
  failed=$((failed + $(sed -n 's/^[a-z0-9]*: [0-9][0-9]* passed, \([0-9][0-9]*\) failed.*/\1/p' "$storage_log" | awk '{s+=$1} END {print s+0}')))
fi

# --- 3c. kube-apiserver under load (benches/k8s_load), small, so the tool cannot rot ---------
load_step="benches/k8s_load (go test; both profiles, 200 ConfigMaps, via kube-apiserver; watch-churn on 3 etcds followed by 3 mem_etcds, FOLLOW=1)"
if [ "$#" -ne 0 ]; then
  record "$load_step" "left out: arguments select a subset of the cargo tests"
elif [ ! -x target/release/mem_etcd ]; then
  record "$load_step" "FAILED (no target/release/mem_etcd: the cargo build failed)"
elif [ -z "${KUBE_APISERVER_BIN:-}" ] && [ "$skip_ok" = 1 ]; then
  log "!!!!!!!! WARNING: no kube-apiserver; MEM_ETCD_SKIP_PEERS=1, so benches/k8s_load was SKIPPED !!!!!!!!"
  record "$load_step" "SKIPPED (no kube-apiserver; MEM_ETCD_SKIP_PEERS=1)"
else
  log "$load_step"
  # Every write acknowledged, every list whole, every watch event delivered once and in order
  # (STRICT), against the same target as the cargo tests.
  if (cd benches/k8s_load && GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local go test ./...) &&
      BACKENDS=${MEM_ETCD_TEST_TARGET:-mem_etcd} CONCURRENCY=5 OBJECTS=200 LISTS=10 WATCHERS=5 \
        STRICT=1 RUN_TIMEOUT=3m MEM_BIN="$PWD/target/release/mem_etcd" \
        RESULTS="$(mktemp)" benches/k8s_load.sh &&
      BACKENDS=etcd3 PROFILES=watch-churn FOLLOW=1 FOLLOW_MEMBERS=3 CONCURRENCY=5 OBJECTS=200 \
        WATCHERS=5 STRICT=1 RUN_TIMEOUT=3m CHARTS=0 MEM_BIN="$PWD/target/release/mem_etcd" \
        RESULTS="$(mktemp)" benches/k8s_load.sh; then
    record "$load_step" passed
  else
    record "$load_step" FAILED
  fi
fi

# --- 3d. the scale benchmark (benches/scale.sh), tiny, so it cannot rot ----------------------
scale_step="benches/scale.sh (2,000 objects, mem_etcd: every measure)"
if [ "$#" -ne 0 ]; then
  record "$scale_step" "left out: arguments select a subset of the cargo tests"
elif [ ! -x target/release/mem_etcd ]; then
  record "$scale_step" "FAILED (no target/release/mem_etcd: the cargo build failed)"
elif [ -z "${KUBE_APISERVER_BIN:-}" ] && [ "$skip_ok" = 1 ]; then
  log "!!!!!!!! WARNING: no kube-apiserver; MEM_ETCD_SKIP_PEERS=1, so benches/scale.sh was SKIPPED !!!!!!!!"
  record "$scale_step" "SKIPPED (no kube-apiserver; MEM_ETCD_SKIP_PEERS=1)"
else
  log "$scale_step"
  # Every measure runs to its end (a put, a restart, a catch-up that fails stops the script).
  if SIZES=2000 STORES=mem_etcd MEM_BIN="$PWD/target/release/mem_etcd" \
      RESULTS="$(mktemp)" timeout 600 benches/scale.sh; then
    record "$scale_step" passed
  else
    record "$scale_step" FAILED
  fi
fi

# --- 3e. hosted control planes (benches/tenants.sh), tiny, so it cannot rot ----------------------
tenants_step="benches/tenants.sh (2 control planes on mem_etcd: density and the noisy neighbour)"
if [ "$#" -ne 0 ]; then
  record "$tenants_step" "left out: arguments select a subset of the cargo tests"
elif [ ! -x target/release/mem_etcd ]; then
  record "$tenants_step" "FAILED (no target/release/mem_etcd: the cargo build failed)"
elif [ -z "${KUBE_APISERVER_BIN:-}" ] && [ "$skip_ok" = 1 ]; then
  log "!!!!!!!! WARNING: no kube-apiserver; MEM_ETCD_SKIP_PEERS=1, so benches/tenants.sh was SKIPPED !!!!!!!!"
  record "$tenants_step" "SKIPPED (no kube-apiserver; MEM_ETCD_SKIP_PEERS=1)"
else
  log "$tenants_step"
  # Every control plane ready, every load run to its end with its figures.
  if TENANTS=2 STORES=mem_etcd DENSITY_OBJECTS=50 DENSITY_LEASES=10 DENSITY_RENEW=2s \
      DENSITY_WINDOW=4s NOISY_OBJECTS=300 NOISY_CLIENTS=5 NOISY_WINDOW=4s WATCHERS=3 \
      MEM_BIN="$PWD/target/release/mem_etcd" RESULTS="$(mktemp)" timeout 600 benches/tenants.sh; then
    record "$tenants_step" passed
  else
    record "$tenants_step" FAILED
  fi
fi

# --- 3f. the live move's cut-over (benches/follow_cutover.sh), tiny, so it cannot rot ---------
cutover_step="benches/follow_cutover.sh (2,000 keys; etcd followed, then cut over exact)"
if [ "$#" -ne 0 ]; then
  record "$cutover_step" "left out: arguments select a subset of the cargo tests"
elif [ ! -x target/release/mem_etcd ]; then
  record "$cutover_step" "FAILED (no target/release/mem_etcd: the cargo build failed)"
elif [ -z "${ETCD_BIN:-}" ] && [ "$skip_ok" = 1 ]; then
  log "!!!!!!!! WARNING: no etcd; MEM_ETCD_SKIP_PEERS=1, so benches/follow_cutover.sh was SKIPPED !!!!!!!!"
  record "$cutover_step" "SKIPPED (no etcd; MEM_ETCD_SKIP_PEERS=1)"
else
  log "$cutover_step"
  # follow exits 0 only once the copy checked exact at the cut-over.
  if KEYS=2000 WRITES=100 RATE=100 DIR="$(mktemp -d)/cutover" MEM_BIN="$PWD/target/release/mem_etcd" \
      timeout 300 benches/follow_cutover.sh; then
    record "$cutover_step" passed
  else
    record "$cutover_step" FAILED
  fi
fi

# --- 4. benches, in test mode ---------------------------------------------------------------
bench_step="cargo bench --bench store --bench lease_expiry --bench e2e -- --test"
log "$bench_step"
if cargo bench --bench store --bench lease_expiry --bench e2e -- --test; then
  record "$bench_step" passed
else
  record "$bench_step" FAILED
fi

# --- summary --------------------------------------------------------------------------------
log "summary"
printf '%s\n' "${results[@]}" >&2
if [ -n "$failing_tests" ]; then
  printf '\nfailing cargo tests:\n%s\n' "$failing_tests" >&2
fi
echo "$passed passed, $failed failed"
if [ "$failed_steps" -ne 0 ]; then
  log "FAILED: $failed_steps step(s) failed"
  exit 1
fi
log "all tests passed"
