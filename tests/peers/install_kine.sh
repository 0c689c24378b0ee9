#!/usr/bin/env bash
# Builds kine (github.com/k3s-io/kine, the etcd API on a SQL database that k3s runs on) from the
# Go module proxy, at a pinned version, for benches/k8s_load.sh's kine and kine_pg backends.
#
# Built as kine's own release build (scripts/build in its module) builds it: CGO on, with
# mattn/go-sqlite3's bundled SQLite (the cgo SQLite driver, k3s's default datastore), and the
# build tags and SQLite CGO_CFLAGS that script sets. Both are read from that script in the
# module zip, so another version builds with its own; the version is stamped as its script
# stamps it. Not static (its script links statically; nothing here needs that).
# kine's go.mod has no `replace` lines, so `go install module@version` builds it with exactly
# the dependency versions kine pins.
#
# PostgreSQL for kine_pg comes from Debian's packages: this script checks that initdb, pg_ctl
# and postgres are there (apt-get install postgresql when they are not) and prints their
# directory on the line before the last.
#
# Output: $PEERS_DIR/kine-v<VER>/kine; prints that directory on the last line.
# Cached: a binary that already reports the wanted version is kept (CI reuses ~/.cache).
# Cold, on 2 cores: about 2.5 minutes, downloads included (measured with another build running).
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
#
# Usage: tests/peers/install_kine.sh [VERSION]   (default: $KINE_PEER_VERSION or 0.17.5, the
#        newest v0.17 the Go module proxy serves: `go list -m -versions github.com/k3s-io/kine`)
#        NO_POSTGRES=1: kine only
set -euo pipefail

VER=${1:-${KINE_PEER_VERSION:-0.17.5}}; VER=${VER#v}
PEERS_DIR=${MEM_ETCD_PEERS_DIR:-$HOME/.cache/mem_etcd/peers}
OUT=$PEERS_DIR/kine-v$VER
WDIR=$PEERS_DIR/build/kine-v$VER
export GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=1

log() { echo "[install_kine $(date +%H:%M:%S)] $*" >&2; }

# PostgreSQL's server programs, from Debian's package (the newest major installed).
pg_bindir() {
  local d
  for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then echo "$d"; return 0; fi
  done
  return 1
}
if [ -z "${NO_POSTGRES:-}" ]; then
  if ! PG_BIN=$(pg_bindir); then
    log "installing PostgreSQL from Debian's packages (apt-get install postgresql)"
    if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq postgresql >/dev/null
    PG_BIN=$(pg_bindir) || { log "no initdb/pg_ctl/postgres under /usr/lib/postgresql/*/bin"; exit 1; }
  fi
  log "$("$PG_BIN/postgres" --version)"
fi

# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$(dirname "${BASH_SOURCE[0]}")/install_go.sh" | tail -n 1) ||
  { log "no Go >= 1.26 (tests/peers/install_go.sh failed)"; exit 1; }
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH
command -v gcc >/dev/null || { log "gcc is required (kine's SQLite driver is cgo)"; exit 1; }

if ! { [ -x "$OUT/kine" ] && [[ "$("$OUT/kine" --version 2>/dev/null || true)" == *"v$VER "* ]]; }; then
  mkdir -p "$WDIR/dl" "$OUT"
  log "fetching github.com/k3s-io/kine@v$VER (module zip)"
  go_dl() { (cd "$WDIR/dl" && go mod download -json "github.com/k3s-io/kine@v$VER"); }
  if ! dl=$(go_dl 2>"$WDIR/go.err"); then
    if grep -qiE 'verifying|sum.golang.org|checksum database' "$WDIR/go.err"; then
      log "checksum database unreachable: GOSUMDB=off"; export GOSUMDB=off
      dl=$(go_dl)
    else cat "$WDIR/go.err" >&2; exit 1; fi
  fi
  MOD=$(sed -n 's/.*"Dir": "\(.*\)",*/\1/p' <<<"$dl")
  BUILD=$MOD/scripts/build
  [ -f "$BUILD" ] || { log "no scripts/build in $MOD"; exit 1; }
  # TAGS="a,b,c" on one line; CGO_CFLAGS=" ... " over several lines.
  TAGS=$(sed -n 's/^TAGS="\(.*\)"$/\1/p' "$BUILD" | head -1)
  CFLAGS=$(awk '/^CGO_CFLAGS="/{on=1; sub(/^CGO_CFLAGS="/, "")} on{if (sub(/"$/, "")) {print; exit} print}' "$BUILD" | xargs)
  [ -n "$TAGS" ] || { log "found no TAGS= in $BUILD"; exit 1; }
  log "build tags (kine's scripts/build): $TAGS"
  log "CGO_CFLAGS (kine's scripts/build): $CFLAGS"
  LDF="-s -w -X github.com/k3s-io/kine/pkg/version.Version=v$VER -X github.com/k3s-io/kine/pkg/version.GitCommit=gomod-v$VER"
  t0=$SECONDS
  log "building github.com/k3s-io/kine@v$VER (first time only; a few minutes on 2 cores)"
  rm -rf "${WDIR:?}/bin"
  ( cd "$WDIR/dl"
    GOBIN=$WDIR/bin CGO_CFLAGS="$CFLAGS" go install -trimpath -tags "$TAGS" -ldflags "$LDF" \
      "github.com/k3s-io/kine@v$VER" )
  mv "$WDIR/bin/kine" "$OUT/kine"
  printf '%s\n' "version v$VER" "tags $TAGS" "CGO_CFLAGS $CFLAGS" >"$OUT/BUILD_INFO"
  log "kine built in $((SECONDS - t0)) s"
  [[ "$("$OUT/kine" --version 2>/dev/null || true)" == *"v$VER "* ]] || {
    log "built kine does not report v$VER: $("$OUT/kine" --version 2>&1 || true)"; exit 1; }
fi

log "$("$OUT/kine" --version 2>&1)"
if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; fi
echo "$OUT"
