package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// stateServer is a Python process whose state lives only in memory and in
// kernel objects: a seeded random generator, a generator half-way
// through, a dict, 16 MiB of random bytes, a file open at an offset, a
// TCP listener on the sandbox's loopback, and a connected pair with bytes
// in flight. It answers over FIFOs: "dump" describes the state without
// changing it, "step" advances the interpreter's state, and "sock" uses
// the sockets.
const stateServer = `
import hashlib, json, os, random, socket
os.mkfifo("/tmp/sreq"); os.mkfifo("/tmp/sresp")
random.seed(os.urandom(16))
mem = bytearray(os.urandom(16 << 20))
d = {"k%d" % i: os.urandom(8).hex() for i in range(100)}
def squares():
    n = 0
    while True:
        n += 1
        yield n * n
gen = squares(); next(gen); next(gen)
log = open("/root/state.log", "a+"); log.write("x" * 1234); log.flush()
lst = socket.socket(); lst.bind(("127.0.0.1", 7000)); lst.listen(8)
a = socket.create_connection(("127.0.0.1", 7000)); b, _ = lst.accept()
a.sendall(b"in-flight")
steps = 0
def sha(data): return hashlib.sha256(data).hexdigest()
def procs():
    out = []
    for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if p == "1" or "state.py" in cmd or cmd.startswith("sleep"):
            out.append([int(p), cmd])
    return out
open("/tmp/state.pid", "w").write(str(os.getpid()))
while True:
    with open("/tmp/sreq") as r:
        cmd = r.read().strip()
    if cmd == "dump":
        reply = {"procs": procs(), "mem": sha(mem), "dict": sha(json.dumps(d, sort_keys=True).encode()),
                 "random": sha(repr(random.getstate()).encode()), "steps": steps, "log_offset": log.tell(),
                 "files": sha(open("/root/state.txt", "rb").read() + open("/tmp/state.tmp", "rb").read())}
    elif cmd == "step":
        steps += 1
        reply = {"square": next(gen), "random": random.random(), "steps": steps}
    else:
        pending = b.recv(64)
        a.sendall(b"ping"); echo = b.recv(4)
        c = socket.create_connection(("127.0.0.1", 7000)); s, _ = lst.accept()
        c.sendall(b"new"); fresh = s.recv(3)
        reply = {"pending": pending.decode(), "echo": echo.decode(), "fresh": fresh.decode()}
    with open("/tmp/sresp", "w") as w:
        w.write(json.dumps(reply, sort_keys=True) + "\n")
`

// ask sends one request to sb's state server and returns its JSON reply.
func (m *testManager) ask(t *testing.T, sb *sandbox.Sandbox, req string) string {
	t.Helper()
	out, errOut, exit := m.sh(t, sb, "echo "+req+" > /tmp/sreq; cat /tmp/sresp")
	if exit.Code != 0 {
		t.Fatalf("%s: %s: exit %d: %s", sb.Name, req, exit.Code, errOut)
	}
	return strings.TrimSpace(out)
}

// TestForkKeepsState checks that every way of making a copy gives copies
// in the source's exact state at that moment: its processes (same pids
// and command lines), memory, files, open files and sockets (bytes in
// flight, a listener that still accepts) and a running Python
// interpreter's state (its random generator and a suspended generator
// step on identically). Each technique makes 1 and 10 copies: a live fork
// (its checkpoint scratch on tmpfs, restored lazily with --background), a
// fork into restore targets, restores from a checkpoint that is not yet
// durable (its seal still running), and restores that claim hot copies.
func TestForkKeepsState(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	setup := "head -c 100000 /dev/urandom > /root/state.txt; head -c 5000 /dev/urandom > /tmp/state.tmp; " +
		"sleep 100000 >/dev/null 2>&1 & " +
		"cat > /tmp/state.py <<'EOF'" + stateServer + "EOF\n" +
		"python3 /tmp/state.py >/tmp/state.err 2>&1 & while [ ! -p /tmp/sresp ]; do sleep 0.01; done"
	if _, errOut, exit := m.sh(t, src, setup); exit.Code != 0 {
		t.Fatalf("start the state server: %s", errOut)
	}
	m.ask(t, src, "step") // some interpreter history before the first copy

	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "targets", Targets: 10, Limits: src.Config.Limits}); err != nil {
		t.Fatal(err)
	}
	fillTargets := func(t *testing.T) {
		if _, err := m.FillPool(ctx, "targets"); err != nil {
			t.Fatal(err)
		}
	}
	techniques := []struct {
		name string
		copy func(t *testing.T, n int) []*sandbox.Sandbox
	}{
		{"live fork", func(t *testing.T, n int) []*sandbox.Sandbox {
			copies, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: n})
			if err != nil {
				t.Fatal(err)
			}
			return copies
		}},
		{"fork into restore targets", func(t *testing.T, n int) []*sandbox.Sandbox {
			fillTargets(t)
			waiting := targetIDs(t, m, "targets")
			copies, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: n})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range copies {
				if !waiting[c.ID] {
					t.Errorf("copy %s was not one of the restore targets", c.Name)
				}
			}
			return copies
		}},
		{"restore before the snapshot is durable", func(t *testing.T, n int) []*sandbox.Sandbox {
			snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if snap.Durable {
				t.Error("the checkpoint returned after its seal")
			}
			copies := make([]*sandbox.Sandbox, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range copies {
				wg.Go(func() { copies[i], errs[i] = m.Restore(ctx, snap.ID, sandbox.RestoreOptions{}) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			return copies
		}},
		{"restore claimed from a hot pool", func(t *testing.T, n int) []*sandbox.Sandbox {
			snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pool := fmt.Sprintf("hot-%d", n)
			if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: pool, From: snap.ID, Hot: n}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.RemovePool(context.Background(), pool) })
			if made, err := m.FillPool(ctx, pool); err != nil || made != n {
				t.Fatalf("fill %s: %d, %v", pool, made, err)
			}
			waiting := memberIDs(t, m, pool, sandbox.StatePaused)
			copies := make([]*sandbox.Sandbox, n)
			for i := range copies {
				if copies[i], err = m.Restore(ctx, snap.ID, sandbox.RestoreOptions{}); err != nil {
					t.Fatal(err)
				}
				if !waiting[copies[i].ID] {
					t.Errorf("copy %s was not one of the hot copies", copies[i].Name)
				}
			}
			return copies
		}},
	}
	for _, tc := range techniques {
		for _, n := range []int{1, 10} {
			t.Run(fmt.Sprintf("%s x%d", tc.name, n), func(t *testing.T) {
				want := m.ask(t, src, "dump")
				copies := tc.copy(t, n)
				t.Cleanup(func() {
					for _, c := range copies {
						m.Remove(context.Background(), c.ID, true)
					}
				})
				if len(copies) != n {
					t.Fatalf("%d copies, want %d", len(copies), n)
				}
				var steps []string
				for _, c := range copies {
					if got := m.ask(t, c, "dump"); got != want {
						t.Errorf("%s: state %s\nwant the source's %s", c.Name, got, want)
					}
					var sock map[string]string
					if err := json.Unmarshal([]byte(m.ask(t, c, "sock")), &sock); err != nil ||
						sock["pending"] != "in-flight" || sock["echo"] != "ping" || sock["fresh"] != "new" {
						t.Errorf("%s: sockets after the copy: %v %v", c.Name, sock, err)
					}
					steps = append(steps, m.ask(t, c, "step"))
				}
				// The interpreter steps on as the source does.
				next := m.ask(t, src, "step")
				for i, s := range steps {
					if s != next {
						t.Errorf("%s stepped to %s, the source to %s", copies[i].Name, s, next)
					}
				}
			})
		}
	}
}
