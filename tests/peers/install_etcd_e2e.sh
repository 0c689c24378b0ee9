#!/usr/bin/env bash
# Builds etcd's own end-to-end suite (Go module go.etcd.io/etcd/tests/v3) from the Go module
# proxy, at a pinned version, for tests/etcd_e2e.sh.
#
# What it makes, under $PEERS_DIR/etcd-e2e-v<VER>/:
#   src/tests/          the module's source (the tests read ../fixtures and ../../etcd.conf.yml.sample
#                       relative to their package directory, so they run from src/tests/<pkg>)
#   src/etcd.conf.yml.sample   from the root module go.etcd.io/etcd/v3 (TestEtcdExampleConfig);
#                       the proxy does not have every root-module version (3.6.16 is missing, 3.6.8
#                       is there), so the newest one at or below VER in the same minor is used; the
#                       file did not change between 3.6.8 and 3.6.14.
#   e2e.test            package tests/e2e
#   common.test         package tests/common built with -tags e2e (the same cases as the
#                       integration flavour, but against spawned binaries)
# Prints that directory on the last line.
#
# Why the go.mod is edited: the published tests module carries `replace` lines that point at
# sibling directories of etcd's repository (../api, ../server, ...), which the module zip does not
# have. Without them Go resolves the same modules at the pinned version from the proxy.
#
# Cached: a directory whose stamp names the wanted version is reused.
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
#
# Usage: tests/peers/install_etcd_e2e.sh [VERSION]   (default: $ETCD_PEER_VERSION or 3.6.16)
set -euo pipefail

VER=${1:-${ETCD_PEER_VERSION:-3.6.16}}; VER=${VER#v}
PEERS_DIR=${MEM_ETCD_PEERS_DIR:-$HOME/.cache/mem_etcd/peers}
OUT=$PEERS_DIR/etcd-e2e-v$VER
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local

log() { echo "[install_etcd_e2e] $*" >&2; }
# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$(dirname "${BASH_SOURCE[0]}")/install_go.sh" | tail -n 1) ||
  { log "no Go >= 1.26 (tests/peers/install_go.sh failed)"; exit 1; }
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH

if [ -x "$OUT/e2e.test" ] && [ -x "$OUT/common.test" ] && [ -f "$OUT/src/etcd.conf.yml.sample" ] &&
   [ "$(cat "$OUT/stamp" 2>/dev/null || true)" = "v$VER" ]; then
  echo "$OUT"; exit 0
fi

# `go mod download` prints the unpacked directory; the module cache is read-only, so copy it.
moddir() { # MODULE@VERSION
  local j
  j=$(go mod download -json "$1" 2>/dev/null || GOSUMDB=off go mod download -json "$1")
  printf '%s\n' "$j" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

log "fetching go.etcd.io/etcd/tests/v3@v$VER and the root module (for etcd.conf.yml.sample)"
tests_dir=$(moddir "go.etcd.io/etcd/tests/v3@v$VER")
# Newest root-module version <= VER with the same major.minor.
versions=$(go list -m -versions go.etcd.io/etcd/v3 2>/dev/null || GOSUMDB=off go list -m -versions go.etcd.io/etcd/v3)
root_ver=$(printf '%s v%s\n' "$versions" "$VER" | tr ' ' '\n' | grep -E "^v${VER%.*}\.[0-9]+$" | sort -uV |
  sed -n "/^v$VER\$/q;p" | tail -n 1)
case " $versions " in *" v$VER "*) root_ver=v$VER ;; esac
[ -n "$root_ver" ] || { log "no go.etcd.io/etcd/v3 version <= v$VER on the proxy"; exit 1; }
log "etcd.conf.yml.sample from go.etcd.io/etcd/v3@$root_ver"
root_dir=$(moddir "go.etcd.io/etcd/v3@$root_ver")
[ -d "$tests_dir/e2e" ] || { log "no e2e package in $tests_dir"; exit 1; }
[ -f "$root_dir/etcd.conf.yml.sample" ] || { log "no etcd.conf.yml.sample in $root_dir"; exit 1; }

rm -rf "$OUT"; mkdir -p "$OUT/src"
cp -r "$tests_dir" "$OUT/src/tests"
chmod -R u+w "$OUT/src/tests"
cp "$root_dir/etcd.conf.yml.sample" "$OUT/src/etcd.conf.yml.sample"
chmod u+w "$OUT/src/etcd.conf.yml.sample"

# Drop the `replace ( ... )` block and the `toolchain` line (GOTOOLCHAIN=local builds with the Go
# found here; it must satisfy the module's `go` line).
sed -i -e '/^replace (/,/^)/d' -e '/^replace .*=> \.\./d' -e '/^toolchain /d' "$OUT/src/tests/go.mod"

log "building e2e.test and common.test (first time only; a few minutes on 2 cores)"
( cd "$OUT/src/tests"
  gobuild() {
    if ! go test -c "$@" 2>"$OUT/build.err"; then
      # The checksum database is not always reachable from here; the module proxy is.
      if grep -qiE 'verifying|sum.golang.org|checksum database' "$OUT/build.err"; then
        GOSUMDB=off go test -c "$@"
      else cat "$OUT/build.err" >&2; exit 1; fi
    fi
  }
  gobuild -o "$OUT/e2e.test" ./e2e
  gobuild -tags e2e -o "$OUT/common.test" ./common )
rm -f "$OUT/build.err"
echo "v$VER" >"$OUT/stamp"
log "built $OUT/e2e.test and $OUT/common.test"
echo "$OUT"
