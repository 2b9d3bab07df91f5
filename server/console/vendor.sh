#!/usr/bin/env bash
# Copies the console's browser libraries, pinned by vendor/package-lock.json,
# into web/vendor, which is committed: a fresh clone builds the console
# without npm. Run it after changing vendor/package.json.
set -euo pipefail
cd "$(dirname "$0")"
(cd vendor && npm ci --no-audit --no-fund --loglevel=error)
x=vendor/node_modules/@xterm/xterm
# No source map: it is not shipped, and a browser would ask for it.
sed '/^\/\/# sourceMappingURL=/d' "$x/lib/xterm.js" >web/vendor/xterm.js
cp "$x/css/xterm.css" web/vendor/xterm.css
cp "$x/LICENSE" web/vendor/xterm.LICENSE.txt
