#!/usr/bin/env bash
# Installs what the tests need when it is missing: redis-server, a C
# compiler, the Python redis client (python3-redis, used by the interop
# tests through /usr/bin/python3), and Chromium (/usr/bin/chromium, which
# integration/ui_test.go drives headless to test the /ui dashboard), and
# Slurm (munge, slurmctld, slurmd, slurm-client, slurmrestd: providers/slurm's tests
# start a single-node cluster through internal/slurmtest). Uses
# apt-get when run as root (or with sudo). Then builds the Kubernetes
# control plane providers/kube's tests start (internal/kubetest) with
# scripts/k8s-build.sh: from the Go module proxy, about 10 minutes the
# first time, cached after that (instant).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v cc >/dev/null 2>&1 || need+=(gcc)   # builds a shared object in the LD_PRELOAD regression test
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || need+=(python3 python3-redis)
[ -x /usr/bin/chromium ] || need+=(chromium)   # the /ui dashboard's browser test
{ [ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null 2>&1; } || need+=(munge slurmctld slurmd slurm-client)   # providers/slurm's tests run a real Slurm (internal/slurmtest)
{ [ -x /usr/sbin/slurmrestd ] || command -v slurmrestd >/dev/null 2>&1; } || need+=(slurmrestd)   # and its REST transport, a real slurmrestd with JWT

k8s() { "$here/k8s-build.sh" >/dev/null; }

if [ ${#need[@]} -eq 0 ]; then
  k8s
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "missing: ${need[*]} — install them with: apt-get install -y ${need[*]}" >&2
    exit 1
  fi
fi
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
k8s
