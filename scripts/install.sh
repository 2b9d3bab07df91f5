#!/usr/bin/env bash
# Installs smolvm, smolvm-agent and the pinned runsc into $PREFIX/bin
# (default /usr/local). Everything is built from source with the Go
# toolchain; runsc is static (CGO_ENABLED=0) because a dynamically linked
# runsc cannot re-execute itself inside its own chroot.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
BIN=$PREFIX/bin
mkdir -p "$BIN"
export CGO_ENABLED=0

if ! command -v go >/dev/null; then
	echo "install.sh: Go is required (https://go.dev/dl)" >&2
	exit 1
fi

# runsc: rebuild only when the pinned gVisor version changed.
pin=$(grep -oE 'gvisor\.dev/gvisor v[^ ]+' tools/runsc/go.mod | head -n1 | cut -d' ' -f2)
[ -n "$pin" ] || { echo "install.sh: no gVisor version pinned in tools/runsc/go.mod" >&2; exit 1; }
stamp=$PREFIX/lib/smolvm/runsc.version
if [ ! -x "$BIN/runsc" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$pin" ]; then
	echo "building runsc $pin (takes a few minutes the first time)" >&2
	(cd tools/runsc && go build -trimpath -o "$BIN/runsc.new" gvisor.dev/gvisor/runsc)
	mv "$BIN/runsc.new" "$BIN/runsc"
	mkdir -p "$(dirname "$stamp")"
	echo "$pin" >"$stamp"
fi

go build -trimpath -o "$BIN/smolvm.new" ./cmd/smolvm
go build -trimpath -ldflags="-s -w" -o "$BIN/smolvm-agent.new" ./cmd/smolvm-agent
mv "$BIN/smolvm.new" "$BIN/smolvm"
mv "$BIN/smolvm-agent.new" "$BIN/smolvm-agent"
echo "installed smolvm, smolvm-agent and runsc ($pin) in $BIN" >&2
