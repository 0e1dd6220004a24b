#!/usr/bin/env bash
# Runs the Python client's tests (clients/python/tests) against a real
# adapter: builds the adapter and cb-supervisor into a temp dir with
# ${GO:-go}, then runs unittest with Debian's python3 (python3-redis). Each
# test class starts its own redis-server on a unix socket and its own
# adapter, and stops them. Works as root (jobs then run as nobody) and as a
# normal user. Exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}

dir=$(mktemp -d "${TMPDIR:-/tmp}/cb-python.XXXXXX")
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"

echo "building the adapter and cb-supervisor into $dir" >&2
$GO build -o "$dir/adapter" ./cmd/adapter
$GO build -o "$dir/cb-supervisor" ./cmd/cb-supervisor

export COMPUTEBOARD_ADAPTER="$dir/adapter"
export PYTHONPATH="clients/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
"$PYTHON" -m unittest discover -s clients/python/tests -t clients/python -v
