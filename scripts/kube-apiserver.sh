#!/usr/bin/env bash
# Builds kube-apiserver from the Go module proxy, once per version, and prints the binary's path.
# The router's discovery test (router/kube) runs it with etcd against real EndpointSlices.
#
# k8s.io/kubernetes is not meant to be required from outside: its go.mod requires each staging
# module (k8s.io/api, client-go, apiserver, ...) at v0.0.0 and replaces it by ./staging/....
# A scratch module requires k8s.io/kubernetes at VERSION and replaces every one of those staging
# modules by its published twin, v0.MINOR.PATCH, read from that go.mod so that none is missed.
#
# Usage: scripts/kube-apiserver.sh [VERSION]   (default v1.37.2)
# The binary lands in .ci/cache/kube/VERSION/kube-apiserver (gitignored); a second run prints
# the cached path at once. The build log is .ci/cache/kube/VERSION/build.log. Exit status 1 (and
# nothing on stdout) when the build fails, so that a caller can skip what needs it.
# Env: NICE (default 10), the niceness of the build: it takes minutes and all the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-v1.37.2}
if ! [[ $VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "usage: scripts/kube-apiserver.sh [v1.MINOR.PATCH]" >&2
  exit 2
fi
MINOR=${BASH_REMATCH[1]}
STAGING="v0.$MINOR.${BASH_REMATCH[2]}"
OUT="$PWD/.ci/cache/kube/$VERSION"
BIN="$OUT/kube-apiserver"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$OUT/src"
LOG="$OUT/build.log"
: >"$LOG"
(
  set -euo pipefail
  cd "$OUT/src"
  # The kubernetes go.mod, from the module cache (downloaded through the proxy if missing).
  gomod=$(go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  [ -f "$gomod" ] || { echo "no go.mod for k8s.io/kubernetes@$VERSION"; exit 1; }
  gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
  {
    echo "module ubatch.local/kube-apiserver-build"
    echo
    echo "go $gover"
    echo
    echo "require k8s.io/kubernetes $VERSION"
    echo
    echo "replace ("
    # Every staging module the kubernetes module requires at v0.0.0.
    sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) v0\.0\.0$#\t\1 => \1 '"$STAGING"'#p' "$gomod"
    echo ")"
  } >go.mod
  echo "== go.mod"; cat go.mod
  # go get resolves the rest of the graph and writes go.sum; then the build itself.
  GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@$VERSION"
  # The version the API server reports (/version), as a release build stamps it.
  v="k8s.io/component-base/version"
  ldflags="-s -X $v.gitVersion=$VERSION -X $v.gitMajor=1 -X $v.gitMinor=$MINOR"
  CGO_ENABLED=0 nice -n "${NICE:-10}" go build -trimpath -ldflags="$ldflags" -o "$BIN.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$BIN.tmp" "$BIN"
) >>"$LOG" 2>&1 || {
  echo "kube-apiserver $VERSION: the build failed; see $LOG" >&2
  tail -n 20 "$LOG" >&2
  exit 1
}
echo "$BIN"
