#!/bin/sh
# go test -exec wrapper: runs a test binary as nobody, from a copy nobody
# can read, so that `go test -short -exec scripts/unprivileged.sh ./...`
# proves the fast tier needs no root (scripts/test.sh runs it first).
set -eu
bin=$1
shift
dir=$(mktemp -d /tmp/smolvm-unprivileged.XXXXXX)
chmod 755 "$dir"
cp "$bin" "$dir/"
chmod 755 "$dir/${bin##*/}"
home=$dir/home
mkdir "$home" && chmod 777 "$home"
trap 'rm -rf "$dir"' EXIT
# Without CI set, a test that needs root skips rather than fails: the
# full tier, as root, runs it.
setpriv --reuid=65534 --regid=65534 --clear-groups env -u CI HOME="$home" GOCACHE="$home/gocache" "$dir/${bin##*/}" "$@"
