#!/usr/bin/env bash
# Builds etcd's official `benchmark` tool (tools/benchmark in etcd's root module) from the Go
# module proxy, to load mem_etcd and a real etcd with the same client. The proxy publishes the
# root module only for some tags; 3.6.8 is the newest 3.6 one it serves.
#
# Output: $PEERS_DIR/benchmark-v<VER>/benchmark; prints that path on the last line.
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
# Usage: tests/peers/install_benchmark.sh [VERSION]   (default 3.6.8)
set -euo pipefail

VER=${1:-3.6.8}; VER=${VER#v}
PEERS_DIR=${MEM_ETCD_PEERS_DIR:-$HOME/.cache/mem_etcd/peers}
OUT=$PEERS_DIR/benchmark-v$VER/benchmark
WDIR=$PEERS_DIR/build/benchmark-v$VER
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local

log() { echo "[install_benchmark] $*" >&2; }
# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$(dirname "${BASH_SOURCE[0]}")/install_go.sh" | tail -n 1) ||
  { log "no Go >= 1.26 (tests/peers/install_go.sh failed)"; exit 1; }
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH

if [ ! -x "$OUT" ]; then
  mkdir -p "$WDIR" "$(dirname "$OUT")"
  printf 'module mem_etcd.local/peer/benchmark\n\ngo 1.24\n\nrequire go.etcd.io/etcd/v3 v%s\n' "$VER" >"$WDIR/go.mod"
  rm -f "$WDIR/go.sum"
  echo "[install_benchmark] building go.etcd.io/etcd/v3/tools/benchmark@v$VER" >&2
  ( cd "$WDIR"
    if ! go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" go.etcd.io/etcd/v3/tools/benchmark 2>build.err; then
      if grep -qiE 'verifying|sum.golang.org|checksum database' build.err; then
        GOSUMDB=off go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" go.etcd.io/etcd/v3/tools/benchmark
      else cat build.err >&2; exit 1; fi
    fi )
  mv "$OUT.tmp" "$OUT"
fi
echo "$OUT"
