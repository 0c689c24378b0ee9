#!/usr/bin/env bash
# Runs Kubernetes' own storage test suites against mem_etcd: k8s.io/apiserver's pkg/storage/etcd3
# (the etcd3 storage.Interface: CRUD, lists, pagination, watches, compaction, leases) and
# pkg/storage/cacher (the watch cache over it: consistent reads from cache, RequestProgress,
# bookmarks), at the apiserver version matching the kube-apiserver we test against.
#
# How: the suites start their server through k8s.io/apiserver/pkg/storage/etcd3/testserver
# (RunEtcd starts an embedded etcd). We copy the apiserver module source from the Go module cache,
# point that import at our drop-in package (tests/k8s_storage/testserver, which starts one fresh
# server process per RunEtcd call), build the two test binaries and run them unmodified.
#
# Cached in ~/.cache/mem_etcd/k8s-storage/<version>-<hash>/ (the hash covers our testserver module,
# the Go version and this script's preparation recipe): a warm machine skips the copy and the
# build (cold: several minutes on 2 cores).
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
#
#   tests/k8s_storage/run.sh [extra test binary flags...]     e.g. -test.failfast
#
# Environment:
#   MEM_ETCD_BIN                  the server (default: `cargo build --release`, target/release/mem_etcd)
#   MEM_ETCD_STORAGE_TARGET=etcd  run the suites against real etcd instead (ETCD_BIN, or the peer
#                                 tests/peers/install_etcd.sh builds), to check the suites themselves
#   MEM_ETCD_STORAGE_SUITES       which suites (default "etcd3 cacher")
#   MEM_ETCD_STORAGE_RUN          only the tests matching this -test.run regex
#   K8S_STORAGE_VERSION           k8s.io/apiserver version (default v0.36.3, i.e. Kubernetes 1.36.3)
#   MEM_ETCD_STORAGE_LOG_DIR      where the full -test.v logs go (default <cache>/logs/<target>)
#   MEM_ETCD_STORAGE_SERVER_ARGS  extra server flags, space separated
#
# Prints "<suite>: N passed, M failed, K skipped" per suite (top-level tests; the excluded ones
# count as skipped) and exits non-zero if any test failed or a binary did not finish.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VER=${K8S_STORAGE_VERSION:-v0.36.3}; VER=v${VER#v}
CACHE=${MEM_ETCD_K8S_STORAGE_DIR:-$HOME/.cache/mem_etcd/k8s-storage}
TARGET=${MEM_ETCD_STORAGE_TARGET:-mem_etcd}
read -r -a SUITES <<<"${MEM_ETCD_STORAGE_SUITES:-etcd3 cacher}"
OUR_MODULE=mem_etcd.local/k8s_storage
UPSTREAM_PKG=k8s.io/apiserver/pkg/storage/etcd3/testserver
# Bump when the preparation below changes, so cached copies made the old way are not reused.
PREP_REV=1

export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local

log() { printf '[k8s_storage %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# Tests excluded for reasons outside mem_etcd's storage semantics: "suite TestName reason".
# Top-level test names only (-test.skip cannot alternate across subtest levels).
EXCLUDED=(
)
# Tests whose parallel subtests must overlap in time to pass: run apart, in a second invocation
# with -test.parallel 8 instead of 1 ("suite TestName reason"). They fail on real etcd too when
# serialized.
PARALLEL=(
  "cacher TestGet  an object written with a 1 s TTL (a 2 s lease: etcd's minimum) must still exist \
when its subtests read it; serialized, the 'too high resource version' subtest waits 3 s first"
)

# --- the server -------------------------------------------------------------------------------
case $TARGET in
  mem_etcd)
    if [ -z "${MEM_ETCD_BIN:-}" ]; then
      log "cargo build --release (the mem_etcd binary)"
      (cd "$ROOT" && nice cargo build --release --bin mem_etcd) >&2 || die "cargo build --release"
      MEM_ETCD_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/mem_etcd
    fi
    [ -x "$MEM_ETCD_BIN" ] || die "MEM_ETCD_BIN=$MEM_ETCD_BIN is not executable"
    MEM_ETCD_BIN=$(cd "$(dirname "$MEM_ETCD_BIN")" && pwd)/$(basename "$MEM_ETCD_BIN")
    export MEM_ETCD_BIN
    log "target: mem_etcd $MEM_ETCD_BIN"
    ;;
  etcd)
    if [ -z "${ETCD_BIN:-}" ]; then
      peer_dir=$("$ROOT/tests/peers/install_etcd.sh" | tail -n 1) || die "tests/peers/install_etcd.sh"
      ETCD_BIN=$peer_dir/etcd
    fi
    [ -x "$ETCD_BIN" ] || die "ETCD_BIN=$ETCD_BIN is not executable"
    export ETCD_BIN
    log "target: etcd $ETCD_BIN ($("$ETCD_BIN" --version | head -n 1))"
    ;;
  *) die "MEM_ETCD_STORAGE_TARGET=$TARGET: want mem_etcd or etcd" ;;
esac
export MEM_ETCD_STORAGE_TARGET=$TARGET

# --- Go and the apiserver module ------------------------------------------------------------
# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$ROOT/tests/peers/install_go.sh" | tail -n 1) ||
  die "no Go >= 1.26 (tests/peers/install_go.sh failed)"
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH
GOVER=$(go env GOVERSION); GOVER=${GOVER#go}
mkdir -p "$CACHE/dl"
# Outside any module, so that no go.mod around changes what is downloaded.
dl() { (cd "$CACHE/dl" && go mod download -json "k8s.io/apiserver@$VER"); }
if ! info=$(dl 2>"$CACHE/dl/err"); then
  if grep -qiE 'verifying|sum.golang.org|checksum database' "$CACHE/dl/err"; then
    log "checksum database unreachable: GOSUMDB=off"; export GOSUMDB=off
    info=$(dl) || die "go mod download k8s.io/apiserver@$VER"
  else cat "$CACHE/dl/err" >&2; die "go mod download k8s.io/apiserver@$VER"; fi
fi
MODDIR=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
[ -f "$MODDIR/go.mod" ] || die "no module directory for k8s.io/apiserver@$VER in: $info"
NEED=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$MODDIR/go.mod" | head -n 1)
[ "$(printf '%s\n%s\n' "$NEED" "$GOVER" | sort -V | head -n 1)" = "$NEED" ] ||
  die "k8s.io/apiserver@$VER needs Go >= $NEED, found $GOVER"
log "k8s.io/apiserver@$VER (needs Go $NEED; using $GOVER)"

# --- the prepared copy and the test binaries (cached) ------------------------------------------
HASH=$( { echo "prep $PREP_REV go $GOVER"; cd "$HERE" && find go.mod go.sum testserver -type f -name '*' | LC_ALL=C sort |
          while read -r f; do echo "$f"; cat "$f"; done; } | sha256sum | cut -c1-16)
KEY=$CACHE/$VER-$HASH
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9   # one build at a time per machine; released when the script exits

t_build=$(date +%s)
if [ ! -f "$KEY/.prepared" ]; then
  log "preparing $KEY (copy of the module source with our testserver)"
  rm -rf "$KEY"; mkdir -p "$KEY/bin"
  cp -r "$MODDIR" "$KEY/src"; chmod -R u+w "$KEY/src"
  mkdir -p "$KEY/testserver_module"
  cp -r "$HERE/go.mod" "$HERE/go.sum" "$HERE/testserver" "$KEY/testserver_module/"
  cd "$KEY/src"
  mapfile -t users < <(grep -rlF --include='*.go' "\"$UPSTREAM_PKG\"" pkg)
  [ ${#users[@]} -gt 0 ] || die "no file imports $UPSTREAM_PKG: has upstream moved it?"
  sed -i "s#\"$UPSTREAM_PKG\"#\"$OUR_MODULE/testserver\"#" "${users[@]}"
  log "rewrote the testserver import in: ${users[*]}"
  go mod edit -require="$OUR_MODULE@v0.0.0" -replace="$OUR_MODULE=../testserver_module"
  touch "$KEY/.prepared"
  # Builds of this version with an older testserver are obsolete now.
  for old in "$CACHE/$VER"-*; do [ "$old" = "$KEY" ] || rm -rf "$old"; done
fi
for s in "${SUITES[@]}"; do
  [ -d "$KEY/src/pkg/storage/$s" ] || die "no suite pkg/storage/$s in k8s.io/apiserver@$VER"
  if [ ! -x "$KEY/bin/$s.test" ]; then
    log "go test -c ./pkg/storage/$s (cold: several minutes on 2 cores)"
    (cd "$KEY/src" && nice go test -c -o "$KEY/bin/$s.test.tmp" "./pkg/storage/$s") || die "building the $s tests"
    mv "$KEY/bin/$s.test.tmp" "$KEY/bin/$s.test"
  fi
done
flock -u 9
log "test binaries ready in $(( $(date +%s) - t_build ))s: $KEY/bin"

# --- run -------------------------------------------------------------------------------------
LOGDIR=${MEM_ETCD_STORAGE_LOG_DIR:-$CACHE/logs/$TARGET}
mkdir -p "$LOGDIR"
RUN=${MEM_ETCD_STORAGE_RUN:-}

# entry "suite TestName reason..." -> e_suite, e_name, e_reason
split() { read -r e_suite e_name e_reason <<<"$1"; }
for list in EXCLUDED PARALLEL; do
  declare -n lref=$list
  [ ${#lref[@]} -gt 0 ] || continue
  [ $list = EXCLUDED ] && log "excluded tests:" || log "tests run apart with -test.parallel 8:"
  for e in "${lref[@]}"; do split "$e"; log "  $e_suite $e_name: $e_reason"; done
done
unset -n lref

status=0
summary=()
for s in "${SUITES[@]}"; do
  out=$LOGDIR/$s.log
  dir=$KEY/src/pkg/storage/$s
  base=(-test.v -test.count 1 -test.timeout 20m)
  skip= excluded=0 apart=
  for e in "${EXCLUDED[@]}"; do
    split "$e"; [ "$e_suite" = "$s" ] || continue
    skip+="${skip:+|}^$e_name\$"; excluded=$((excluded + 1))
  done
  for e in "${PARALLEL[@]}"; do
    split "$e"; [ "$e_suite" = "$s" ] || continue
    skip+="${skip:+|}^$e_name\$"
    if [ -z "$RUN" ] || grep -qE -- "$RUN" <<<"$e_name"; then apart+="${apart:+|}^$e_name\$"; fi
  done
  args=("${base[@]}" -test.parallel 1)
  [ -n "$skip" ] && args+=(-test.skip "$skip")
  [ -n "$RUN" ] && args+=(-test.run "$RUN")
  log "running $s against $TARGET: $s.test ${args[*]} $* (log: $out)"
  t0=$(date +%s)
  rc=0
  (cd "$dir" && "$KEY/bin/$s.test" "${args[@]}" "$@") >"$out" 2>&1 || rc=$?
  if [ -n "$apart" ]; then
    args=("${base[@]}" -test.parallel 8 -test.run "$apart")
    log "running $s against $TARGET: $s.test ${args[*]} $* (log: $out)"
    (cd "$dir" && "$KEY/bin/$s.test" "${args[@]}" "$@") >>"$out" 2>&1 || rc=$((rc ? rc : $?))
  fi
  secs=$(( $(date +%s) - t0 ))
  # Top-level results only: subtests' lines are indented.
  passed=$(grep -acE '^--- PASS: ' "$out" || true)
  failed=$(grep -acE '^--- FAIL: ' "$out" || true)
  skipped=$(grep -acE '^--- SKIP: ' "$out" || true)
  line="$s: $passed passed, $failed failed, $((skipped + excluded)) skipped"
  [ "$excluded" -gt 0 ] && line+=" ($excluded excluded)"
  if [ "$failed" -gt 0 ]; then
    status=1
    log "$s: failing tests, with their assertion lines (full output: $out):"
    grep -aE "^--- FAIL: " "$out" | sed 's/^--- FAIL: \([^ ]*\).*/\1/' | while read -r name; do
      echo "  $name" >&2
      # The test's section: from its === RUN to its --- FAIL, assertion lines (file.go:N:) only.
      awk -v n="$name" '$0 == "=== RUN   " n {on=1} on && /^[[:space:]]+[A-Za-z0-9_]+\.go:[0-9]+:/ {print "      " $0; c++}
        on && index($0, "--- FAIL: " n " ") == 1 {exit} c >= 30 {print "      ..."; exit}' "$out" >&2
    done
  fi
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    status=1
    line+="; the binary exited $rc without a failing test (timeout or panic?)"
    log "$s: tail of $out:"; tail -n 40 "$out" >&2
  fi
  summary+=("$line (${secs}s)")
done
printf '%s\n' "${summary[@]}"
exit $status
