#!/usr/bin/env bash
# Runs smolvm's whole test suite: unit tests, and integration tests against
# real runsc sandboxes (installed first if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
# The kube/ tests run envtest against a real kube-apiserver and etcd, and
# the forge tests a real Gitea on loopback, each built from the Go module
# proxy once per pinned version (scripts/kube-tools.sh: 10-20 minutes cold;
# scripts/gitea-tools.sh: 20 minutes cold at load 15, 6.5 minutes of CPU;
# a few greps once built). They build side by side, so that their module
# downloads overlap.
tools=$(mktemp -d)
scripts/kube-tools.sh >"$tools/kube" &
kube_pid=$!
scripts/gitea-tools.sh >"$tools/gitea" &
gitea_pid=$!
wait "$kube_pid"
wait "$gitea_pid"
kube=$(cat "$tools/kube")
export TEST_ASSET_KUBE_APISERVER=$kube/kube-apiserver TEST_ASSET_ETCD=$kube/etcd
SMOLVM_GITEA=$(cat "$tools/gitea")/gitea
export SMOLVM_GITEA
rm -rf "$tools"
# The SDK suites (go test ./sdk) run with the system python3 and node;
# the E2B compatibility suite (go test ./server/e2b) drives the real e2b npm
# package, pinned in sdk/e2b-compat/package-lock.json. Network tests build
# closed worlds with iproute2 and fetch with curl and python3 from inside
# sandboxes (the host image shows the host's /usr). The code interpreter's
# scenarios draw a matplotlib figure inside a sandbox (image/png results).
# Browser sandboxes (go test ./workflow/browser) run Debian's chromium from
# the host image and drive it with playwright-core (sdk/browser-test); the
# web console's tests (go test ./server/console) drive it on the host with
# playwright-core and axe-core (sdk/console-test);
# TestBrowserImage builds the browser image with mmdebstrap from Debian's
# archive (its root filesystem is then cached in ~/.cache/smolvm-test), and
# TestCLIBaseImage the base image (smolvm image build base), the same way.
missing=()
command -v ip >/dev/null || missing+=(iproute2)
for p in curl python3; do
	[[ -x /usr/bin/$p ]] || missing+=("$p")
done
python3 -c 'import matplotlib' 2>/dev/null || missing+=(python3-matplotlib)
# The agent runner's eval fixtures run pytest inside sandboxes (host /usr);
# SWE-bench grading falls back to patch(1), as its harness does.
/usr/bin/python3 -c 'import pytest' 2>/dev/null || missing+=(python3-pytest)
command -v patch >/dev/null || missing+=(patch)
[[ -x /usr/lib/chromium/chromium ]] || missing+=(chromium)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# The microVM backend (go test ./runtime/backend/vm): QEMU, qemu-img, a
# Debian kernel and its modules, a static busybox for the initramfs,
# mkfs.ext4 and xz (to uncompress the kernel).
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v qemu-img >/dev/null || missing+=(qemu-utils)
compgen -G '/boot/vmlinuz-*' >/dev/null || missing+=(linux-image-amd64)
[[ -x /bin/busybox ]] || missing+=(busybox-static)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v xz >/dev/null || missing+=(xz-utils)
# Image builds (go test ./runtime/build): skopeo reads the archives image
# save writes; BenchmarkBuild compares with buildah.
command -v skopeo >/dev/null || missing+=(skopeo)
command -v buildah >/dev/null || missing+=(buildah)
if ((${#missing[@]})); then
	apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi
export PATH=${PREFIX:-/usr/local}/bin:$PATH
export SMOLVM_RUNSC=${SMOLVM_RUNSC:-$(command -v runsc)}
(cd sdk/e2b-compat && npm ci --no-audit --no-fund --loglevel=error)
(cd sdk/browser-test && npm ci --no-audit --no-fund --loglevel=error)
(cd sdk/console-test && npm ci --no-audit --no-fund --loglevel=error)
go vet ./...
# The fast tier first, as nobody: it must need no root, runsc, QEMU,
# kube-apiserver, node or Chromium (testenv.Integration, testenv.NeedRoot).
go test -short -count=1 -timeout 10m -exec "$PWD/scripts/unprivileged.sh" ./...
# The full tier: everything, as root.
go test -count=1 -timeout 45m ./...
