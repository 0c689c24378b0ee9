#!/usr/bin/env bash
# Builds the Kubernetes peers the end-to-end test (tests/it/kubernetes/k8s_e2e.rs) runs against mem_etcd and
# a real etcd: kube-apiserver and kubectl, from the Go module proxy, at a pinned version.
#
# Why a wrapper module: k8s.io/kubernetes cannot be `go install`ed. Its go.mod requires the
# staging modules (k8s.io/api, apimachinery, apiserver, client-go, ...) at v0.0.0 and `replace`s
# them with ./staging/src/... . A small module that requires k8s.io/kubernetes v1.X.Y and replaces
# every staging module it requires at v0.0.0 with the published v0.X.Y builds the same commands.
# The staging list and the `go`/`godebug` lines are read from kubernetes' own go.mod, so this
# works for any version whose modules the proxy serves (`go list -m -versions k8s.io/kubernetes`).
#
# Output: $PEERS_DIR/k8s-v<VER>/{kube-apiserver,kubectl}; prints the directory on the last line.
# Cached: a binary that already reports the wanted version is kept (CI reuses ~/.cache).
# Cold, on 2 cores: kube-apiserver 7-10 minutes, kubectl under 1 more.
# Go: tests/peers/install_go.sh (Go >= 1.26 on PATH or in /usr/local/go, else go1.26.8 fetched once
# into ~/.cache/mem_etcd/go).
#
# What the apiserver needs at run time (a service-account signing key, serving certificates,
# flags) is made by the test itself, not here.
#
# Usage: tests/peers/install_k8s.sh [VERSION]   (default: $K8S_PEER_VERSION or 1.36.3, the newest
#        1.36 patch the Go module proxy serves)
set -euo pipefail

VER=${1:-${K8S_PEER_VERSION:-1.36.3}}; VER=${VER#v}
MAJOR=${VER%%.*}; MINOR=${VER#*.}; MINOR=${MINOR%%.*}
SVER="v0.${VER#*.}"             # staging modules: 1.36.3 -> v0.36.3
PEERS_DIR=${MEM_ETCD_PEERS_DIR:-$HOME/.cache/mem_etcd/peers}
OUT=$PEERS_DIR/k8s-v$VER
WDIR=$PEERS_DIR/build/k8s-v$VER
# Release binaries are static: CGO off.
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local

log() { echo "[install_k8s $(date +%H:%M:%S)] $*" >&2; }
# Go >= 1.26: the one on PATH or in /usr/local/go, else fetched once (tests/peers/install_go.sh).
go_dir=$("$(dirname "${BASH_SOURCE[0]}")/install_go.sh" | tail -n 1) ||
  { log "no Go >= 1.26 (tests/peers/install_go.sh failed)"; exit 1; }
[ "$(command -v go)" = "$go_dir/go" ] || export PATH=$go_dir:$PATH

# Does the cached binary report the wanted version? Captured first: `| head -1 | grep -q` under
# pipefail fails at random when grep exits early and the binary gets SIGPIPE.
cached() { # BIN VERSION_ARGS...
  local bin=$OUT/$1; shift
  [ -x "$bin" ] && [[ "$("$bin" "$@" 2>/dev/null || true)" == *"v$VER"* ]]
}

# go, retried once without the checksum database if that is what failed (the module proxy is
# reachable from places sum.golang.org is not).
go_sumdb_fallback() {
  if ! go "$@" 2>"$WDIR/go.err"; then
    if grep -qiE 'verifying|sum.golang.org|checksum database' "$WDIR/go.err"; then
      log "checksum database unreachable: GOSUMDB=off"; export GOSUMDB=off
      go "$@"
    else cat "$WDIR/go.err" >&2; return 1; fi
  fi
}

need=()
cached kube-apiserver --version || need+=(kube-apiserver)
cached kubectl version --client || need+=(kubectl)

if [ ${#need[@]} -gt 0 ]; then
  mkdir -p "$WDIR" "$OUT"
  log "fetching k8s.io/kubernetes@v$VER (module zip; a few hundred MB unpacked)"
  # Outside any module, so that no go.mod around changes what is downloaded.
  mkdir -p "$WDIR/dl"
  dl=$(cd "$WDIR/dl" && go_sumdb_fallback mod download -json "k8s.io/kubernetes@v$VER") || {
    log "cannot download k8s.io/kubernetes@v$VER from the module proxy: $dl"; exit 1; }
  KGOMOD=$(sed -n 's/.*"GoMod": "\(.*\)",*/\1/p' <<<"$dl")
  [ -f "$KGOMOD" ] || { log "no go.mod for k8s.io/kubernetes@v$VER in: $dl"; exit 1; }

  GOLINE=$(grep -m1 '^go ' "$KGOMOD")
  GODEBUG_LINES=$(grep '^godebug' "$KGOMOD" || true)
  # The staging modules: those kubernetes replaces with ./staging/... and requires at v0.0.0.
  STAGING=$(awk '/^replace/{r=1;next} r&&/^\)/{r=0} r&&/=> \.\/staging/{print $1}' "$KGOMOD" | sort -u)
  REQ000=$(awk '$1 ~ /^k8s\.io\/[a-z0-9-]+$/ && $2 == "v0.0.0" {print $1}' "$KGOMOD" | sort -u)
  USE=$(comm -12 <(echo "$STAGING") <(echo "$REQ000"))
  [ -n "$USE" ] || { log "found no staging modules in $KGOMOD"; exit 1; }
  log "kubernetes go.mod: '$GOLINE'; $(wc -w <<<"$USE") staging modules replaced with $SVER"

  {
    echo "module mem_etcd.local/peer/k8s"
    echo
    echo "$GOLINE"
    if [ -n "$GODEBUG_LINES" ]; then echo; echo "$GODEBUG_LINES"; fi
    echo
    echo "require k8s.io/kubernetes v$VER"
    echo
    echo "replace ("
    for m in $USE; do printf '\t%s => %s %s\n' "$m" "$m" "$SVER"; done
    echo ")"
  } >"$WDIR/go.mod.want"
  # go.sum only starts over when the wanted module changes.
  if ! cmp -s "$WDIR/go.mod.want" "$WDIR/go.mod.base"; then
    cp "$WDIR/go.mod.want" "$WDIR/go.mod"; mv "$WDIR/go.mod.want" "$WDIR/go.mod.base"
    rm -f "$WDIR/go.sum"
  fi
  rm -f "$WDIR/go.mod.want"

  # Version stamping, as hack/lib/version.sh does for release builds.
  LDF="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDF="$LDF -X $p.gitVersion=v$VER -X $p.gitMajor=$MAJOR -X $p.gitMinor=$MINOR"
    LDF="$LDF -X $p.gitTreeState=clean -X $p.gitCommit=gomod-v$VER"
    LDF="$LDF -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done

  cd "$WDIR"
  t0=$SECONDS
  log "resolving the module graph and downloading dependencies"
  pkgs=(); for t in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
  go_sumdb_fallback list -deps "${pkgs[@]}" >/dev/null
  log "dependencies resolved in $((SECONDS - t0)) s"
  for t in "${need[@]}"; do
    t0=$SECONDS
    log "building $t (first time only; about $([ "$t" = kubectl ] && echo 1 || echo 7-10) minutes on 2 cores)"
    go build -trimpath -ldflags "$LDF" -o "$OUT/$t.tmp" "k8s.io/kubernetes/cmd/$t"
    mv "$OUT/$t.tmp" "$OUT/$t"
    log "$t built in $((SECONDS - t0)) s"
  done
  cached kube-apiserver --version || { log "built kube-apiserver does not report v$VER"; exit 1; }
  cached kubectl version --client || { log "built kubectl does not report v$VER"; exit 1; }
fi

kubectl_version=$("$OUT/kubectl" version --client 2>&1 || true)
log "$("$OUT/kube-apiserver" --version 2>&1); kubectl ${kubectl_version%%$'\n'*}"
echo "$OUT"
