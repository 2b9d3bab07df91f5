#!/usr/bin/env bash
# The first five minutes with smolvm: installs it (scripts/install.sh),
# then shows what a sandbox is for, timing each step: Python running in a
# sandbox, what the sandbox cannot reach, a checkpoint of a process that
# holds state in memory, a fork into three copies that carry that state
# on and diverge, and the removal of it all. Every step is checked: the
# first one that fails stops the demo with its error.
#
# Run it as root: sandboxes are made of namespaces, cgroups and mounts.
# SMOLVM_DEMO_NO_INSTALL=1 skips the install and uses the smolvm on $PATH
# (the demo's own test runs it so, with freshly built binaries).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
trap 'echo "demo.sh: FAILED (line $LINENO): $BASH_COMMAND" >&2' ERR

if [[ $EUID -ne 0 ]]; then
	echo "demo.sh: run it as root: sandboxes are made of namespaces, cgroups and mounts" >&2
	exit 1
fi
if [[ -z ${SMOLVM_DEMO_NO_INSTALL:-} ]]; then
	scripts/install.sh
	export PATH=${PREFIX:-/usr/local}/bin:$PATH
fi

name=demo-$$
snap=demo-$$-snap
copies=("$name-copy-1" "$name-copy-2" "$name-copy-3")
tmp=$(mktemp -d /tmp/smolvm-demo.XXXXXX)
cleanup() {
	trap - ERR
	set +e
	[[ -n ${server:-} ]] && kill "$server" 2>/dev/null
	smolvm rm -f "$name" "$name-restored" "${copies[@]}" >/dev/null 2>&1
	smolvm snapshot rm "$snap" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

# step TITLE starts a section.
step() { printf '\n== %s\n' "$1"; }

# timed WHAT CMD... runs CMD, then says how long WHAT took.
timed() {
	local what=$1 start=${EPOCHREALTIME//[.,]/}
	shift
	if ! "$@"; then
		echo "demo.sh: FAILED: $*" >&2
		exit 1
	fi
	local end=${EPOCHREALTIME//[.,]/}
	printf '   [%s: %d ms]\n' "$what" $(((end - start) / 1000))
}

# expect WHAT GOT WANT stops the demo unless GOT is WANT.
expect() {
	if [[ $2 != "$3" ]]; then
		echo "demo.sh: FAILED: $1: got '$2', want '$3'" >&2
		exit 1
	fi
}

# The process that holds state: a counter whose total lives only in its
# memory. Each connection to its socket adds a number to the total and
# gets the new total back, with the counter's pid and hostname.
counter='
import os, socket
total = 0
srv = socket.socket(socket.AF_UNIX)
srv.bind("/tmp/counter.sock")
srv.listen()
while True:
    c, _ = srv.accept()
    with c:
        total += int(c.recv(64) or b"0")
        c.sendall(f"total={total} pid={os.getpid()} host={socket.gethostname()}".encode())
'

# add SANDBOX N adds N to the counter in SANDBOX and prints its answer.
add() {
	smolvm exec "$1" -- python3 -c '
import socket, sys, time
for _ in range(100):
    try:
        c = socket.socket(socket.AF_UNIX)
        c.connect("/tmp/counter.sock")
        break
    except OSError:
        time.sleep(0.05)
c.sendall(sys.argv[1].encode())
print(c.recv(200).decode())
' "$2"
}

step "check this host"
smolvm doctor

step "create a sandbox: gVisor's kernel, no network, 512 MiB, 1 CPU; its main process is a counter held in memory"
timed "smolvm run" smolvm run --detach --name "$name" --memory 512m --cpus 1 -- python3 -c "$counter"

step "run Python in it"
timed "smolvm exec" smolvm exec "$name" -- python3 -c 'import platform, sys; print("Python", sys.version.split()[0], "on", platform.node())'

step "isolation: host processes, host files, host loopback, host kernel"
secret=$tmp/secret
echo "host secret" >"$secret"
python3 -c '
import http.server, sys
s = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
print(s.server_port, flush=True)
s.serve_forever()
' >"$tmp/port" 2>/dev/null &
server=$!
for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.05; done
port=$(<"$tmp/port")
python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)' "$port"
echo "   on the host: $secret is readable, and a server listens on 127.0.0.1:$port"
timed "smolvm exec" smolvm exec -i "$name" -- python3 - "$secret" "$port" <<'PY'
import os, platform, socket, sys
procs = []
for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    try:
        procs.append(p + ":" + open(f"/proc/{p}/comm").read().strip())
    except OSError:
        pass
print("   processes visible:", " ".join(procs), "(the agent, the counter and this script; none of the host's)")
leaks = []
try:
    open(sys.argv[1]).read()
    leaks.append("the host file is readable")
except OSError as e:
    print("   host file:", e.strerror)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
    leaks.append("the host's loopback server answers")
except OSError as e:
    print("   host loopback server:", e.strerror or e)
print("   kernel:", platform.release(), platform.version())
if leaks:
    sys.exit("LEAK: " + ", ".join(leaks))
PY
echo "   host kernel: $(uname -r) $(uname -v)"
inside=$(smolvm exec "$name" -- uname -r)
if [[ $inside == "$(uname -r)" ]]; then
	expect "the sandbox's kernel" "$inside" "not the host's"
fi

step "a running process holding state: add 7, then 35, to the counter's total"
echo "   $(add "$name" 7)"
before=$(add "$name" 35)
echo "   $before"
expect "the counter" "${before%% *}" "total=42"

step "checkpoint the sandbox while the counter runs (memory, processes and files, to a snapshot)"
timed "smolvm checkpoint" smolvm checkpoint --name "$snap" "$name"

step "restore the snapshot as a new sandbox: the counter goes on from 42"
timed "smolvm restore" smolvm restore --name "$name-restored" "$snap"
got=$(add "$name-restored" 0)
echo "   $got"
expect "the restored counter" "${got%% *}" "total=42"
expect "the restored counter" "${got##*host=}" "$name-restored"

step "fork the running sandbox into 3 copies, each with its own ID and hostname"
timed "smolvm fork" smolvm fork -n 3 --name-prefix "$name-copy" "$name"
for i in 1 2 3; do
	c=$name-copy-$i
	got=$(add "$c" $((i * 100)))
	echo "   $c, after adding $((i * 100)): $got"
	expect "copy $i" "${got%% *}" "total=$((42 + i * 100))"
	expect "copy $i" "${got##*host=}" "$c"
done
got=$(add "$name" 0)
echo "   $name, the source, untouched: $got"
expect "the source" "$got" "$before"
echo "   the counter's in-memory total survived in every copy, then each went its own way"

step "remove everything"
timed "smolvm rm" smolvm rm -f "$name" "$name-restored" "${copies[@]}"
timed "smolvm snapshot rm" smolvm snapshot rm "$snap"
left="$(smolvm ls)$(smolvm snapshot ls)"
if [[ $left == *"$name"* ]]; then
	expect "sandboxes and snapshots left" "$left" "none named $name*"
fi
echo "   no sandbox or snapshot of the demo is left"

echo
echo "Next: smolvm run --rm -it -- python3   (a Python prompt in a fresh sandbox; README.md has the rest)"
