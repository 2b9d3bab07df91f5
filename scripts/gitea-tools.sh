#!/usr/bin/env bash
# Builds the Gitea server that tools/gitea/pin names into
# $PREFIX/lib/smolvm/gitea/<version>/ (default /usr/local), for
# workflow/forge's end-to-end test against a real forge. No Gitea release
# binary is reachable from CI, but the Go module proxy serves
# code.gitea.io/gitea. Its go.mod names the module gitea.dev and carries
# replace directives, so `go install …@version` refuses it: a copy of the
# module directory is built as the main module instead. CGO_ENABLED=0 is
# enough: without the sqlite_mattn tag Gitea links modernc.org/sqlite (pure
# Go). The build takes minutes, so it runs once per recipe and is skipped
# when the stamp matches. Prints the directory holding the binary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
export CGO_ENABLED=0

read -r mod version sum < <(grep -v '^#' tools/gitea/pin)
[ -n "$mod" ] && [ -n "$version" ] && [ -n "$sum" ] || { echo "gitea-tools.sh: tools/gitea/pin names no module, version and sum" >&2; exit 1; }
dir=$PREFIX/lib/smolvm/gitea/$version
recipe="$version $sum $(sha256sum scripts/gitea-tools.sh | cut -c1-12)"
stamp=$dir/version
if [ ! -x "$dir/gitea" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$recipe" ]; then
	echo "building gitea $version (10-20 minutes the first time)" >&2
	tmp=$(mktemp -d)
	trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
	# Outside any module, so the repo's go.mod plays no part.
	info=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod@$version")
	src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
	got=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' <<<"$info")
	[ "$got" = "$sum" ] || { echo "gitea-tools.sh: $mod@$version is $got, tools/gitea/pin says $sum" >&2; exit 1; }
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	mkdir -p "$dir"
	(
		cd "$tmp/src"
		go build -trimpath -ldflags "-s -w -X main.Version=${version#v}" -o "$dir/gitea.new" .
	)
	# Built without the bindata tag, Gitea reads its templates, options
	# (locales, licences) and public files from STATIC_ROOT_PATH: this dir.
	for d in templates options public; do
		rm -rf "${dir:?}/$d"
		cp -r "$tmp/src/$d" "$dir/$d"
	done
	mv "$dir/gitea.new" "$dir/gitea"
	echo "$recipe" >"$stamp"
fi
echo "$dir"
