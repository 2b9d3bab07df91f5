#!/usr/bin/env bash
# Installs smolvm, then shows a sandbox at work: Python runs in it, and the
# host's processes, files, network and kernel stay out of its reach.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export PATH=${PREFIX:-/usr/local}/bin:$PATH
smolvm doctor

name=demo-$$
secret=$(mktemp /tmp/smolvm-demo-secret.XXXXXX)
echo "host secret" >"$secret"
python3 -m http.server 18765 --bind 127.0.0.1 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$secret"; smolvm rm -f $name >/dev/null 2>&1 || true' EXIT

echo "== create a sandbox"
smolvm run --detach --name "$name" --memory 512m --cpus 1
smolvm ls

echo "== run Python in it"
smolvm exec "$name" -- python3 -c 'import platform, sys; print("python", sys.version.split()[0], "on", platform.node())'

echo "== isolation: host processes, host files, host loopback, host kernel"
smolvm exec "$name" -- python3 - "$secret" <<'PY' || true
import os, socket, sys, platform
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("processes visible:", pids)
try:
    open(sys.argv[1]).read(); print("host file: READABLE (bad)")
except OSError as e:
    print("host file:", e.strerror)
try:
    socket.create_connection(("127.0.0.1", 18765), timeout=2); print("host loopback: REACHABLE (bad)")
except OSError as e:
    print("host loopback server:", e.strerror or e)
print("kernel:", platform.release(), platform.version())
PY
echo "host kernel: $(uname -r) $(uname -v)"

echo "== remove it"
smolvm rm -f "$name"
smolvm ls
