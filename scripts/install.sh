#!/usr/bin/env bash
# Installs smolvm, smolvm-guest and the pinned runsc into $PREFIX/bin
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

# runsc: rebuild only when the pinned gVisor version or the recipe changed.
# gVisor's Go module ships runsc's seccomp programs uncompiled, which costs
# every sandbox boot and restore ~140 ms of CPU; seccompgen compiles them
# into a vendored copy first, as gVisor's own Bazel build does. The small
# patches in tools/runsc/patches (each says why in docs/performance.md) are
# applied to that copy; one that no longer applies fails the build. A
# patch is a `git apply` diff against vendor/gvisor.dev/gvisor (a/pkg/...
# paths): copy the file from the module cache into a/ and b/, edit b/, and
# diff -u. The first build takes 5-6 minutes here. smolvm bench's stock
# baseline uses this runsc unless --stock-runsc is given: keep an upstream
# build aside to compare against (docs/testing.md). Debian's runsc (2022)
# hangs on checkpoint --leave-running, and Debian's CRIU 3.17 fails on
# this kernel: use this build.
pin=$(grep -oE 'gvisor\.dev/gvisor v[^ ]+' tools/runsc/go.mod | head -n1 | cut -d' ' -f2)
[ -n "$pin" ] || { echo "install.sh: no gVisor version pinned in tools/runsc/go.mod" >&2; exit 1; }
recipe="$pin seccompgen-$(cat tools/runsc/cmd/seccompgen/main.go tools/runsc/patches/*.patch | sha256sum | cut -c1-12)"
stamp=$PREFIX/lib/smolvm/runsc.version
if [ ! -x "$BIN/runsc" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$recipe" ]; then
	echo "building runsc $pin with precompiled seccomp programs (takes several minutes the first time)" >&2
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cp -r tools/runsc/go.mod tools/runsc/go.sum tools/runsc/tools.go tools/runsc/cmd tools/runsc/patches "$work/"
	(
		cd "$work"
		go mod vendor
		chmod -R u+w vendor
		for p in patches/*.patch; do
			(cd vendor/gvisor.dev/gvisor && git apply "$work/$p") || { echo "install.sh: $p does not apply to gVisor $pin" >&2; exit 1; }
		done
		go run -mod=vendor ./cmd/seccompgen -gvisor vendor/gvisor.dev/gvisor
		go build -mod=vendor -trimpath -o "$BIN/runsc.new" gvisor.dev/gvisor/runsc
	)
	mv "$BIN/runsc.new" "$BIN/runsc"
	mkdir -p "$(dirname "$stamp")"
	echo "$recipe" >"$stamp"
fi

go build -trimpath -o "$BIN/smolvm.new" ./cmd/smolvm
go build -trimpath -ldflags="-s -w" -o "$BIN/smolvm-guest.new" ./cmd/smolvm-guest
mv "$BIN/smolvm.new" "$BIN/smolvm"
mv "$BIN/smolvm-guest.new" "$BIN/smolvm-guest"
echo "installed smolvm, smolvm-guest and runsc ($pin) in $BIN" >&2
