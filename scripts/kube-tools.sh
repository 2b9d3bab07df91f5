#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that tools/kube/go.mod pins into
# $PREFIX/lib/smolvm/kube/<version>/ (default /usr/local), for the kube/
# tests (envtest) and for running smolvm-kube against a local API server.
# No cluster, kind image or envtest tarball is reachable from CI, but the Go
# module proxy serves k8s.io/kubernetes: the first build takes 10-20
# minutes, so it runs once per recipe and is skipped when the stamp matches.
# Prints the directory holding the binaries on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
export CGO_ENABLED=0

kube=$(grep -oE 'k8s\.io/kubernetes v[^ ]+' tools/kube/go.mod | head -n1 | cut -d' ' -f2)
etcd=$(grep -oE 'go\.etcd\.io/etcd/server/v3 v[^ ]+' tools/kube/go.mod | head -n1 | cut -d' ' -f2)
[ -n "$kube" ] && [ -n "$etcd" ] || { echo "kube-tools.sh: tools/kube/go.mod pins no k8s.io/kubernetes or etcd" >&2; exit 1; }
dir=$PREFIX/lib/smolvm/kube/$kube
recipe="$kube etcd-$etcd $(cat tools/kube/go.sum scripts/kube-tools.sh | sha256sum | cut -c1-12)"
stamp=$dir/version
if [ ! -x "$dir/kube-apiserver" ] || [ ! -x "$dir/etcd" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$recipe" ]; then
	echo "building kube-apiserver $kube and etcd $etcd (10-20 minutes the first time)" >&2
	mkdir -p "$dir"
	(
		cd tools/kube
		# version.gitVersion: envtest and clients read the server's version.
		go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kube" \
			-o "$dir/kube-apiserver.new" k8s.io/kubernetes/cmd/kube-apiserver
		go build -trimpath -ldflags "-s -w" -o "$dir/etcd.new" ./cmd/etcd
	)
	mv "$dir/kube-apiserver.new" "$dir/kube-apiserver"
	mv "$dir/etcd.new" "$dir/etcd"
	echo "$recipe" >"$stamp"
fi
echo "$dir"
