#!/usr/bin/env bash
# Finds Go >= 1.26, which builds the reference peers (tests/peers/install_*.sh),
# tests/k8s_storage and benches/k8s_load, or fetches it when the machine has none that new.
#
# The first of these that reports go1.26 or newer is used:
#   1. `go` on PATH,
#   2. /usr/local/go/bin/go,
#   3. the toolchain this script fetched before: $MEM_ETCD_GO_CACHE/go<VER>/bin/go
#      (default ~/.cache/mem_etcd/go/go1.26.8/bin/go; CI reuses ~/.cache),
#   4. otherwise Go <VER> is fetched from the Go module proxy as the module
#      golang.org/toolchain@v0.0.1-go<VER>.<os>-<arch>: the same module, checked against the same
#      checksum database, that the go command downloads for GOTOOLCHAIN=go<VER>. It is a whole Go
#      installation; it is unpacked into the cache above and kept, so the next run costs one
#      `go version`. Any older `go` downloads it: the one on PATH or in /usr/local/go, else
#      Debian's golang-go, installed with apt-get (as root, or with sudo). That is Go 1.19 on
#      bookworm: too old for GOTOOLCHAIN and for the peers, new enough to download a module.
#      A cold fetch takes under a minute; Debian's golang-go stays installed.
#
# Prints the directory holding `go` on the last line. Callers put it first on PATH, unless the
# `go` found on PATH already is that one:
#   go_dir=$(tests/peers/install_go.sh | tail -n 1) || exit 1
#   [ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH
#
# Usage: tests/peers/install_go.sh
# Environment: MEM_ETCD_GO_VERSION (the version fetched in step 4; default 1.26.8, the one on the
# development machines), MEM_ETCD_GO_CACHE (default ~/.cache/mem_etcd/go).
set -euo pipefail

VER=${MEM_ETCD_GO_VERSION:-1.26.8}; VER=${VER#go}
CACHE=${MEM_ETCD_GO_CACHE:-$HOME/.cache/mem_etcd/go}
DEST=$CACHE/go$VER
# Report and run the go that is there; never switch to another toolchain.
export GOTOOLCHAIN=local

log() { echo "[install_go $(date +%H:%M:%S)] $*" >&2; }

# go_version GO: what `GO version` says ("go version go1.26.8 linux/amd64"), run outside any
# module; fails if it does not run.
go_version() { (cd / && "$1" version) 2>/dev/null; }

# new_enough GO: does GO run and report Go 1.26 or newer?
new_enough() {
  local v maj min
  v=$(go_version "$1") || return 1
  v=$(sed -n 's/.* go\([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' <<<"$v")
  read -r maj min <<<"$v" || true
  [ -n "${maj:-}" ] && [ -n "${min:-}" ] && { [ "$maj" -gt 1 ] || [ "$min" -ge 26 ]; }
}

# --- 1-3: a Go that is there already ----------------------------------------------------------
for g in "$(command -v go || true)" /usr/local/go/bin/go "$DEST/bin/go"; do
  if [ -n "$g" ] && [ -x "$g" ] && new_enough "$g"; then
    log "$(go_version "$g") ($g)"
    dirname "$g"
    exit 0
  fi
done

# --- 4: fetch Go $VER from the module proxy ---------------------------------------------------
boot=
for g in "$(command -v go || true)" /usr/local/go/bin/go; do
  if [ -n "$g" ] && [ -x "$g" ] && go_version "$g" >/dev/null; then boot=$g; break; fi
done
if [ -z "$boot" ]; then
  log "no go at all: installing Debian's golang-go (apt-get) to download Go $VER with"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "go is missing and sudo is not available"; exit 1; }
    SUDO=(sudo)
  fi
  command -v apt-get >/dev/null 2>&1 || { log "go is missing and apt-get is not available"; exit 1; }
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
  boot=$(command -v go || true)
  if [ -z "$boot" ] || ! go_version "$boot" >/dev/null; then
    log "no working go after apt-get install golang-go"; exit 1
  fi
fi
MOD=golang.org/toolchain@v0.0.1-go$VER.$("$boot" env GOHOSTOS)-$("$boot" env GOHOSTARCH)
log "Go >= 1.26 not found; fetching $MOD with $(go_version "$boot") ($boot)"

mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/tmp.XXXXXX")
trap 'chmod -R u+w "$TMP" 2>/dev/null || true; rm -rf "$TMP"' EXIT
mkdir -p "$TMP/dl"
# A module cache of its own (thrown away), writable (-modcacherw) so the tree can be moved out;
# outside any module, so that no go.mod around changes what is downloaded.
dl() { (cd "$TMP/dl" && GOMODCACHE=$TMP/mod GOFLAGS=-modcacherw "$boot" mod download -json "$MOD"); }
t0=$SECONDS
if ! info=$(dl 2>"$TMP/err"); then
  # The checksum database is not always reachable from here; the module proxy is.
  # (go mod download -json reports the error in its JSON on stdout, and on stderr.)
  if grep -qiE 'verifying|checksum database' "$TMP/err" - <<<"${info:-}"; then
    log "checksum database unreachable: GOSUMDB=off"
    info=$(GOSUMDB=off dl) || { log "cannot download $MOD: $info"; exit 1; }
  else
    cat "$TMP/err" >&2; log "cannot download $MOD: ${info:-}"; exit 1
  fi
fi
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
[ -f "$dir/bin/go" ] || { log "no bin/go in the module ($info)"; exit 1; }
# Module zips carry no file modes: set the execute bits the go command sets on a toolchain it
# downloaded (cmd/go/internal/toolchain): pkg/tool, lib's go_*_*_exec, bin.
find "$dir/pkg/tool" "$dir/bin" -type f -exec chmod a+x {} +
if [ -d "$dir/lib" ]; then find "$dir/lib" -type f -name 'go_?*_?*_exec' -exec chmod a+x {} +; fi
mv "$dir" "$TMP/go"
got=$(go_version "$TMP/go/bin/go") || { log "the fetched go does not run"; exit 1; }
[[ "$got" == *" go$VER "* ]] || { log "the fetched go reports '$got', not go$VER"; exit 1; }
# Another run may have fetched it meanwhile: keep that one (it may be in use).
if ! { [ -x "$DEST/bin/go" ] && new_enough "$DEST/bin/go"; }; then
  rm -rf "$DEST"
  mv "$TMP/go" "$DEST"
fi
log "$got ($DEST/bin/go), fetched in $((SECONDS - t0)) s"
echo "$DEST/bin"
