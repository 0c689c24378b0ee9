#!/usr/bin/env bash
# Builds the reference peers the differential tests compare against: a real etcd server,
# etcdctl and etcdutl, from the Go module proxy, at a pinned version.
#
# Why a wrapper module: etcd's own go.mod files carry `replace` lines, so `go install
# go.etcd.io/etcd/server/v3@vX` refuses to build. A one-line module that requires the published
# module builds the same main package with the versions etcd itself pins.
#
# Output: $PEERS_DIR/etcd-v<VER>/{etcd,etcdctl,etcdutl}; prints the directory on the last line.
# Cached: a binary that already reports the wanted version is kept (CI reuses ~/.cache).
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
#
# Usage: tests/peers/install_etcd.sh [VERSION]   (default: $ETCD_PEER_VERSION or 3.6.16)
set -euo pipefail

VER=${1:-${ETCD_PEER_VERSION:-3.6.16}}; VER=${VER#v}
PEERS_DIR=${MEM_ETCD_PEERS_DIR:-$HOME/.cache/mem_etcd/peers}
OUT=$PEERS_DIR/etcd-v$VER
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local

log() { echo "[install_etcd] $*" >&2; }
# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$(dirname "${BASH_SOURCE[0]}")/install_go.sh" | tail -n 1) ||
  { log "no Go >= 1.26 (tests/peers/install_go.sh failed)"; exit 1; }
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH

build() { # BIN MODULE VERSION_CMD
  local bin=$1 mod=$2 dst=$OUT/$1 wdir=$PEERS_DIR/build/v$VER/$1
  # Captured first: `| head -1 | grep -q` under pipefail fails at random when grep exits early
  # and the binary gets SIGPIPE, which rebuilt a cached peer for nothing.
  if [ -x "$dst" ] && [[ "$("$dst" "$3" 2>/dev/null || true)" == *"$VER"* ]]; then return 0; fi
  mkdir -p "$wdir" "$OUT"
  printf 'module mem_etcd.local/peer/%s\n\ngo 1.24\n\nrequire %s v%s\n' "$bin" "$mod" "$VER" >"$wdir/go.mod"
  rm -f "$wdir/go.sum"
  log "building $mod@v$VER (first time only; about a minute on 2 cores)"
  ( cd "$wdir"
    if ! go build -trimpath -ldflags "-s -w" -o "$dst.tmp" "$mod" 2>build.err; then
      # The checksum database is not always reachable from here; the module proxy is.
      if grep -qiE 'verifying|sum.golang.org|checksum database' build.err; then
        GOSUMDB=off go build -trimpath -ldflags "-s -w" -o "$dst.tmp" "$mod"
      else cat build.err >&2; exit 1; fi
    fi )
  mv "$dst.tmp" "$dst"
}

build etcd go.etcd.io/etcd/server/v3 --version
build etcdctl go.etcd.io/etcd/etcdctl/v3 version
# etcdutl: offline snapshot restore, to prove an exported snapshot.db is one etcd accepts.
build etcdutl go.etcd.io/etcd/etcdutl/v3 version
log "$("$OUT/etcd" --version | head -1); $("$OUT/etcdctl" version | head -1)"
echo "$OUT"
