#!/usr/bin/env bash
# Runs smolvm's whole test suite: unit tests, and integration tests against
# real runsc sandboxes (installed first if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export PATH=${PREFIX:-/usr/local}/bin:$PATH
export SMOLVM_RUNSC=${SMOLVM_RUNSC:-$(command -v runsc)}
# The E2B compatibility suite drives the real e2b npm package, pinned in
# sdk/e2b-compat/package-lock.json, with node's own test runner.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	apt-get update -qq && apt-get install -y -qq nodejs npm
fi
(cd sdk/e2b-compat && npm ci --no-audit --no-fund --loglevel=error)
go vet ./...
go test -count=1 -timeout 45m ./...
