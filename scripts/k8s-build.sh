#!/usr/bin/env bash
# Builds the Kubernetes control plane that providers/kube's tests run
# against (internal/kubetest): etcd, kube-apiserver, kubectl,
# kube-controller-manager, kube-scheduler and kwok (fake nodes whose pods
# really go Pending -> Running -> Succeeded, without containers).
#
# Debian packages no kube-apiserver, and these machines cannot download
# release binaries, so everything is built from the Go module proxy. The
# first build takes about 8-12 minutes on 2 cores (about 3 GB of RAM at
# its peak); the binaries are cached outside the work tree, so later runs
# take no time. Prints the directory that holds them.
#
# Env: CB_K8S_BIN (default ${XDG_CACHE_HOME:-$HOME/.cache}/computeboard/k8s/v$K8S_VERSION/bin),
#      K8S_VERSION (1.37.2), ETCD_VERSION (3.6.16), KWOK_VERSION (0.8.0).
set -euo pipefail
KV=${K8S_VERSION:-1.37.2}
SV=0.${KV#1.}                  # the staging modules' version: 1.37.2 -> 0.37.2
EV=${ETCD_VERSION:-3.6.16}     # 3.6: Debian's 3.4 lacks RequestWatchProgress, which informers want
WV=${KWOK_VERSION:-0.8.0}
BIN=${CB_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/computeboard/k8s/v$KV/bin}
mkdir -p "$BIN"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "k8s-build: $*" >&2; }

minor=$(echo "$KV" | cut -d. -f2)
ver="-X k8s.io/component-base/version.gitVersion=v$KV -X k8s.io/component-base/version.gitMajor=1"
ver="$ver -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
ver="$ver -X k8s.io/client-go/pkg/version.gitVersion=v$KV -X k8s.io/client-go/pkg/version.gitMajor=1"
ver="$ver -X k8s.io/client-go/pkg/version.gitMinor=$minor"

missing=()
for c in kube-apiserver kubectl kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "building ${missing[*]} v$KV from the module proxy (first time only: about 10 minutes)"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  go mod download -json "k8s.io/kubernetes@v$KV" >/dev/null
  mod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$KV.mod
  # k8s.io/kubernetes points its staging modules at ./staging; a module
  # that depends on it replaces each with its published version (the two
  # sample modules are not published, and nothing here needs them).
  {
    printf 'module computeboard/k8sbuild\n\ngo 1.26\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$KV"
    for m in $(grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging' "$mod" | awk '{print $1}'); do
      if go list -m "$m@v$SV" >/dev/null 2>&1; then printf '\t%s => %s v%s\n' "$m" "$m" "$SV"; fi
    done
    printf ')\n'
  } >go.mod.tmp
  mv go.mod.tmp go.mod   # go list must never see a half-written go.mod
  pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  go get -tool "${pkgs[@]/%/@v$KV}" >/dev/null
  go build -trimpath -ldflags "-s -w $ver" -o "$BIN/" "${pkgs[@]}"
fi

if [ ! -x "$BIN/etcd" ] || [ ! -x "$BIN/etcdctl" ]; then
  log "building etcd v$EV"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  {
    printf 'module computeboard/etcdbuild\n\ngo 1.24\n\nrequire (\n'
    for m in server/v3 etcdctl/v3 api/v3 client/pkg/v3 client/v3 pkg/v3; do printf '\tgo.etcd.io/etcd/%s v%s\n' "$m" "$EV"; done
    printf ')\n\ntool (\n\tgo.etcd.io/etcd/server/v3\n\tgo.etcd.io/etcd/etcdctl/v3\n)\n'
  } >go.mod
  go mod tidy >/dev/null 2>&1
  go build -trimpath -ldflags '-s -w' -o "$BIN/etcd" go.etcd.io/etcd/server/v3
  go build -trimpath -ldflags '-s -w' -o "$BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3
fi

if [ ! -x "$BIN/kwok" ] || [ ! -s "$BIN/kwok-stages.yaml" ]; then
  log "building kwok v$WV"
  GOBIN="$BIN" go install -trimpath -ldflags '-s -w' "sigs.k8s.io/kwok/cmd/kwok@v$WV"
  # kwok plays the kubelet by "stages" (node ready, pod ready, pod
  # complete, pod delete); they ship inside its module.
  go mod download "sigs.k8s.io/kwok@v$WV"
  stages=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$WV/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo '---'
    cat "$stages/$f"
  done >"$BIN/kwok-stages.yaml.tmp"
  mv "$BIN/kwok-stages.yaml.tmp" "$BIN/kwok-stages.yaml"
fi
echo "$BIN"
