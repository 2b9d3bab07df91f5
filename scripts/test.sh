#!/usr/bin/env bash
# Runs smolvm's whole test suite: unit tests, and integration tests against
# real runsc sandboxes (installed first if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
# The SDK suites (go test ./sdk) run with the system python3 and node.
if ! command -v python3 >/dev/null || ! command -v node >/dev/null; then
	apt-get update -qq && apt-get install -y -qq python3 nodejs
fi
export PATH=${PREFIX:-/usr/local}/bin:$PATH
export SMOLVM_RUNSC=${SMOLVM_RUNSC:-$(command -v runsc)}
go vet ./...
go test -count=1 -timeout 45m ./...
