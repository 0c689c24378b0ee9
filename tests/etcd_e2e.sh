#!/usr/bin/env bash
# etcd's own end-to-end suite (go.etcd.io/etcd/tests/v3 at the peer version, 3.6.16 by default)
# run with mem_etcd as the binary named `etcd`, beside the real etcdctl and etcdutl.
#
#   tests/etcd_e2e.sh [--mem-etcd|--etcd] [-run PATTERN] [--bin PATH] [--out DIR] [--timeout SECS]
#
#   --mem-etcd   (default) the server under test is mem_etcd: --bin PATH, else $MEM_ETCD_BIN, else
#                target/release/mem_etcd (built with `cargo build --release --bin mem_etcd`)
#   --etcd       the server is the real etcd of tests/peers/install_etcd.sh (the reference column)
#   -run PAT     Go's -test.run syntax; its first slash-separated element picks the top-level tests
#                of both packages, the rest (if any) is applied below each of them
#   --out DIR    results (default target/etcd-e2e/<mem-etcd|etcd>; emptied first)
#   --timeout S  per top-level test (default 300; the Go test timeout, plus a kill 30 s later)
#
# The suite (packages tests/e2e, and tests/common built with -tags e2e) is built once from the Go
# module proxy by tests/peers/install_etcd_e2e.sh. The suite starts whatever is named `etcd` in its
# -bin-dir: that directory ($OUT/bin) holds a copy of the server binary itself, no wrapper script.
#
# Each top-level test runs alone, one after the other, at nice 10, from its package directory
# (the tests read ../fixtures from there; data directories they leave there are removed before and
# after each test). After each one every process it left behind is killed:
# the framework starts servers in their own sessions (a pty each), so a process group is not
# enough; they are found by the tag variable this script puts in the test's environment (the
# framework passes EXPECT_* variables on to what it spawns) and by their executable being in
# $OUT/bin.
#
# Never run, because they send traffic off loopback (listen on 0.0.0.0, or name the node's IP or
# another address as a peer); they are passed to -test.skip and reported as skipped here:
#   TestEtcdMultiPeer, TestEtcdPeerCNAuth, TestEtcdPeerMultiCNAuth, TestEtcdPeerNameAuth
#     (etcd_config_test.go: --listen-client-urls http://0.0.0.0:0)
#   TestEtcdPeerLocalAddr (etcd_config_test.go: peers on the node's own IP, clients on 0.0.0.0)
#   TestEtcdTLSVersion (etcd_config_test.go: --listen-client-urls https://0.0.0.0:0)
#   TestCtlV3MemberAddAsLearnerWithOneMemberDown (ctl_v3_member_test.go: adds a learner with peer
#     URL http://10.0.0.12:2380, which the members then dial)
#
# Output in $OUT: logs/<pkg>.<Test>.log (the test's -test.v output), results.tsv (one line per
# top-level test: package, test, PASS/FAIL/SKIP, seconds, note), summary.md (per-family table
# and the failing tests, from tests/etcd_e2e_report.py). Exit status 0 when no test failed.
# The full run takes about 70 minutes on 2 cores, so tests/run.sh does not include it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VER=${ETCD_PEER_VERSION:-3.6.16}

SKIP_TESTS=(TestEtcdMultiPeer TestEtcdPeerCNAuth TestEtcdPeerMultiCNAuth TestEtcdPeerNameAuth
  TestEtcdPeerLocalAddr TestEtcdTLSVersion TestCtlV3MemberAddAsLearnerWithOneMemberDown)
SKIP_RE="^($(IFS='|'; echo "${SKIP_TESTS[*]}"))\$"

log() { printf '[etcd_e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 2; }
usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

target=mem-etcd; run_pat=.; out=; per_test=300; server_bin=${MEM_ETCD_BIN:-}
while [ $# -gt 0 ]; do
  case $1 in
    --mem-etcd) target=mem-etcd ;;
    --etcd) target=etcd ;;
    --bin) server_bin=${2:?--bin needs a path}; shift ;;
    -run|--run|-test.run) run_pat=${2:?-run needs a pattern}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --timeout) per_test=${2:?--timeout needs seconds}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
  shift
done
out=${out:-$ROOT/target/etcd-e2e/$target}

peer_dir=$("$ROOT/tests/peers/install_etcd.sh" "$VER" | tail -n 1) || die "could not build the etcd $VER peers"
suite=$("$ROOT/tests/peers/install_etcd_e2e.sh" "$VER" | tail -n 1) || die "could not build etcd's e2e suite"

if [ "$target" = etcd ]; then
  server_bin=$peer_dir/etcd
elif [ -z "$server_bin" ]; then
  log "building mem_etcd (cargo build --release --bin mem_etcd)"
  (cd "$ROOT" && cargo build --release --bin mem_etcd) || die "cargo build failed"
  server_bin=$ROOT/target/release/mem_etcd
fi
[ -x "$server_bin" ] || die "no server binary at $server_bin"

rm -rf "$out"; mkdir -p "$out/bin" "$out/logs"
bindir=$(cd "$out/bin" && pwd)
cp "$server_bin" "$bindir/etcd"
cp "$peer_dir/etcdctl" "$peer_dir/etcdutl" "$bindir/"
log "server under test: $server_bin ($target) as $bindir/etcd; suite: $suite"

# Go splits -test.run on slashes first, so the first element selects top-level tests.
top_pat=${run_pat%%/*}
rest=; [ "$top_pat" = "$run_pat" ] || rest=/${run_pat#*/}

# The processes a test left behind: tagged environment or an executable from our bin dir.
tag="mem_etcd_e2e_$$_$(date +%s)"
leftovers() {
  local p pid exe
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = "$$" ] && continue
    exe=$(readlink "$p/exe" 2>/dev/null || true)
    if [[ "$exe" == "$bindir/"* ]] || grep -qsxz "EXPECT_MEM_ETCD_E2E_TAG=$tag" "$p/environ"; then
      echo "$pid"
    fi
  done
}
reap() { # LOG
  local pids
  pids=$(leftovers | tr '\n' ' ')
  [ -n "${pids// }" ] || return 0
  echo "etcd_e2e.sh: killing leftover processes: $pids" >>"$1"
  # shellcheck disable=SC2086 # one word per pid
  kill -TERM $pids 2>/dev/null || true
  sleep 2
  pids=$(leftovers | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -z "${pids// }" ] || kill -KILL $pids 2>/dev/null || true
}
# Tests that start a server without --data-dir leave `<name>.etcd` (or, for mem_etcd,
# `<name>.mem_etcd`) in the package directory, the working directory; the next test with the same
# name would start on that data. The module source has no such directories.
clean_pkgdir() { rm -rf "$1"/*.etcd "$1"/*.mem_etcd; }
trap 'reap "$out/interrupted.log"; exit 130' INT TERM

results=$out/results.tsv
: >"$results"
started=$(date +%s)
n=0; failed=0
for pkg in e2e common; do
  pkgdir=$suite/src/tests/$pkg
  tests=$(cd "$pkgdir" && "$suite/$pkg.test" -test.list "$top_pat") || die "$pkg.test -test.list failed"
  tests=$(printf '%s\n' "$tests" | grep '^Test' || true)
  for t in $tests; do
    if [[ "$t" =~ $SKIP_RE ]]; then
      printf '%s\t%s\tSKIP\t0\tnot run: sends traffic off loopback\n' "$pkg" "$t" >>"$results"
      continue
    fi
    n=$((n + 1))
    lf=$out/logs/$pkg.$t.log
    clean_pkgdir "$pkgdir"
    t0=$(date +%s)
    set +e
    (cd "$pkgdir" && EXPECT_MEM_ETCD_E2E_TAG=$tag exec setsid -w nice -n 10 \
      timeout -k 10 $((per_test + 30)) "$suite/$pkg.test" -test.run "^$t\$$rest" \
      -test.skip "$SKIP_RE" -test.timeout "${per_test}s" -test.v -bin-dir "$bindir") >"$lf" 2>&1
    rc=$?
    set -e
    reap "$lf"
    clean_pkgdir "$pkgdir"
    secs=$(($(date +%s) - t0))
    note=
    if grep -q "^--- PASS: $t " "$lf"; then status=PASS
    elif grep -q "^--- SKIP: $t " "$lf"; then status=SKIP
    else
      status=FAIL
      if grep -q '^panic: test timed out' "$lf" || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        note="timed out after ${per_test}s"
      elif ! grep -q "^--- FAIL: $t " "$lf"; then note="no result line (exit $rc)"
      fi
    fi
    [ "$status" = FAIL ] && failed=$((failed + 1))
    printf '%s\t%s\t%s\t%s\t%s\n' "$pkg" "$t" "$status" "$secs" "$note" >>"$results"
    log "$n $pkg $t: $status ${secs}s${note:+ ($note)}"
  done
done
total=$(($(date +%s) - started))
printf '%s\n' "$total" >"$out/seconds"
log "ran $n top-level tests in $((total / 60))m$((total % 60))s; $failed failed"
python3 "$ROOT/tests/etcd_e2e_report.py" --suite "$suite" "$out" >"$out/summary.md" ||
  log "the report failed (results are in $results)"
log "summary: $out/summary.md"
[ "$failed" = 0 ]
