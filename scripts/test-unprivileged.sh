#!/usr/bin/env bash
# Runs the local provider's tests that need a user other than root
# (TestUserRulesNotRoot: a provider that is not root runs tasks only as
# itself). `make test` runs as root on CI, where `go test` skips them; this
# runs the package's test binary again as "nobody". Not root: nothing to do,
# `go test` already ran them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "unprivileged provider tests: ran in go test (not root)"
  exit 0
fi
if ! command -v runuser >/dev/null 2>&1 || ! id nobody >/dev/null 2>&1; then
  echo "unprivileged provider tests: need runuser and a user nobody" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
${GO:-go} test -c -o "$dir/local.test" ./providers/local
chmod 755 "$dir/local.test"
install -d -m 1777 "$dir/tmp"
echo "unprivileged provider tests (as nobody):"
out=$(cd "$dir" && runuser -u nobody -- env TMPDIR="$dir/tmp" ./local.test -test.run 'NotRoot' -test.count=1 -test.v 2>&1) || {
  echo "$out" >&2
  exit 1
}
# It must have run them, not matched nothing.
echo "$out" | grep -E '^(--- |ok|PASS|FAIL)'
echo "$out" | grep -q -- '--- PASS: TestUserRulesNotRoot' || { echo "TestUserRulesNotRoot did not run" >&2; exit 1; }
