package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
)

// kvServer is a Python process that keeps a dict only in memory and serves
// it over a pair of FIFOs: "set K V" and "get K", one reply line each.
const kvServer = `
import os
os.mkfifo("/tmp/req"); os.mkfifo("/tmp/resp")
open("/tmp/kv.pid", "w").write(str(os.getpid()))
d = {}
while True:
    with open("/tmp/req") as r:
        words = r.read().split()
    if words[0] == "set":
        d[words[1]] = words[2]
        reply = "ok"
    else:
        reply = d.get(words[1], "missing")
    with open("/tmp/resp", "w") as w:
        w.write(reply + "\n")
`

func (m *testManager) kv(t *testing.T, sb *sandbox.Sandbox, req string) string {
	t.Helper()
	out, errOut, exit := m.sh(t, sb, "echo '"+req+"' > /tmp/req; cat /tmp/resp")
	if exit.Code != 0 {
		t.Fatalf("%s: kv %q: exit %d: %s", sb.Name, req, exit.Code, errOut)
	}
	return strings.TrimSpace(out)
}

func (m *testManager) startKV(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	script := "cat > /tmp/kv.py <<'EOF'" + kvServer + "EOF\n" +
		"python3 /tmp/kv.py >/dev/null 2>&1 & while [ ! -p /tmp/resp ]; do sleep 0.01; done"
	if _, errOut, exit := m.sh(t, sb, script); exit.Code != 0 {
		t.Fatalf("start kv server: %s", errOut)
	}
}

func TestCheckpointRestoreKeepsMemory(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	m.startKV(t, src)
	if got := m.kv(t, src, "set a 1"); got != "ok" {
		t.Fatal(got)
	}
	m.sh(t, src, "echo on-disk > /root/file")
	pid, _, _ := m.sh(t, src, "cat /tmp/kv.pid")

	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Lineage.Sandbox != src.ID || len(snap.ID) != 64 || snap.Size == 0 {
		t.Fatalf("snapshot record: %+v", snap)
	}
	// The source runs on, unchanged, and diverges.
	if got := m.kv(t, src, "set a 2"); got != "ok" {
		t.Fatal(got)
	}

	cp, err := m.Restore(ctx, "warm", sandbox.RestoreOptions{Name: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != sandbox.StateRunning || cp.Snapshot != snap.ID || cp.Name != "copy" {
		t.Fatalf("restored record: %+v", cp)
	}
	if got := m.kv(t, cp, "get a"); got != "1" {
		t.Fatalf("restored dict has a=%q, want the saved 1", got)
	}
	if got := m.kv(t, cp, "set b 3"); got != "ok" {
		t.Fatalf("restored server does not keep running: %q", got)
	}
	if got := m.kv(t, cp, "get b"); got != "3" {
		t.Fatal(got)
	}
	if out, _, _ := m.sh(t, cp, "cat /tmp/kv.pid; cat /root/file"); out != pid+"on-disk\n" {
		t.Fatalf("restored copy: %q: want the same process (pid %s) and the saved file", out, pid)
	}
	if got := m.kv(t, src, "get a"); got != "2" {
		t.Fatalf("source a=%q after the restore, want its own 2", got)
	}
	// A snapshot of a restored sandbox names its parent.
	child, err := m.Checkpoint(ctx, cp.ID, sandbox.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if child.Lineage.Parent != snap.ID {
		t.Fatalf("lineage %+v, want parent %s", child.Lineage, snap.ID)
	}
}

// identity is what must differ between copies.
func (m *testManager) identity(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	out, errOut, exit := m.sh(t, sb, "hostname; cat /etc/machine-id; echo $SMOLVM_SANDBOX_ID")
	if exit.Code != 0 {
		t.Fatalf("%s: %s", sb.Name, errOut)
	}
	if !strings.HasSuffix(out, sb.ID+"\n") {
		t.Fatalf("%s: SMOLVM_SANDBOX_ID in %q, want %s", sb.Name, out, sb.ID)
	}
	return out
}

func TestForksAreIndependent(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	// An on-restore hook that records which copy ran it.
	hook := "mkdir -p /etc/smolvm/on-restore.d && printf '#!/bin/sh\\necho $SMOLVM_SANDBOX_ID > /root/hook\\n' > /etc/smolvm/on-restore.d/10-id && chmod +x /etc/smolvm/on-restore.d/10-id"
	if _, errOut, exit := m.sh(t, src, hook+"; echo base > /root/base"); exit.Code != 0 {
		t.Fatal(errOut)
	}
	forks, err := m.Fork(ctx, src.Name, sandbox.ForkOptions{N: 2, NamePrefix: "try"})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 || forks[0].Name != "try-1" || forks[1].Name != "try-2" || forks[0].ForkedFrom != src.ID {
		t.Fatalf("forks: %+v %+v", forks[0], forks[1])
	}
	for i, f := range forks {
		if _, errOut, exit := m.sh(t, f, fmt.Sprintf("echo %d > /root/x; echo only-%d > /root/only-%d", i, i, i)); exit.Code != 0 {
			t.Fatal(errOut)
		}
	}
	seen := map[string]string{m.identity(t, src): src.Name}
	for i, f := range forks {
		out, _, _ := m.sh(t, f, "cat /root/base /root/x /root/hook; ls /root")
		want := fmt.Sprintf("base\n%d\n%s\nbase\nhook\nonly-%d\nx\n", i, f.ID, i)
		if out != want {
			t.Fatalf("%s sees %q, want %q", f.Name, out, want)
		}
		id := m.identity(t, f)
		if other, dup := seen[id]; dup {
			t.Fatalf("%s has the identity of %s: %q", f.Name, other, id)
		}
		seen[id] = f.Name
	}
	if out, _, _ := m.sh(t, src, "ls /root"); out != "base\n" {
		t.Fatalf("source sees its forks' files: %q", out)
	}
}

func TestRestoreManyTimes(t *testing.T) {
	dir := t.TempDir()
	m := openManager(t, dir)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	m.sh(t, src, "echo saved > /root/f")
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "five", Stop: true})
	if err != nil {
		t.Fatal(err)
	}
	if sb, _ := m.Get(ctx, src.ID); sb.State != sandbox.StateStopped || sb.Reason != "checkpointed" {
		t.Fatalf("after checkpoint --stop: %s (%s)", sb.State, sb.Reason)
	}
	if err := m.Remove(ctx, src.ID, false); err != nil {
		t.Fatal(err)
	}

	// A new process: nothing of the first manager is used any more.
	m2 := openManager(t, dir)
	seen := map[string]bool{}
	var copies []*sandbox.Sandbox
	for i := 0; i < 5; i++ {
		cp, err := m2.Restore(ctx, snap.ID[:19], sandbox.RestoreOptions{})
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		copies = append(copies, cp)
		if out, _, _ := m2.sh(t, cp, "cat /root/f"); out != "saved\n" {
			t.Fatalf("restore %d: %q", i, out)
		}
		id := m2.identity(t, cp)
		if seen[id] {
			t.Fatalf("restore %d repeats an identity: %q", i, id)
		}
		seen[id] = true
	}
	inUse := func(id string) (bool, error) { return SnapshotInUse(ctx, m2.st, id) }
	if err := m2.snaps.Remove(ctx, "five", inUse); !errors.Is(err, snapshot.ErrInUse) {
		t.Fatalf("snapshot rm while restored sandboxes exist: %v, want ErrInUse", err)
	}
	for _, cp := range copies {
		if err := m2.Remove(ctx, cp.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.snaps.Remove(ctx, "five", inUse); err != nil {
		t.Fatal(err)
	}
}

func TestForkUnderHeavyWrites(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	// Each 256 KiB file is written in full before its number is journaled.
	writer := "mkdir /root/d; (i=0; while :; do i=$((i+1)); head -c 262144 /dev/zero > /root/d/$i; echo $i >> /root/journal; done) >/dev/null 2>&1 &" +
		" while [ ! -s /root/journal ] || [ $(wc -l < /root/journal) -lt 20 ]; do sleep 0.01; done"
	if _, errOut, exit := m.sh(t, src, writer); exit.Code != 0 {
		t.Fatal(errOut)
	}
	forks, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	check := "n=0; for i in $(cat /root/journal); do s=$(stat -c %s /root/d/$i) || exit 1; [ $s = 262144 ] || { echo short $i $s; exit 1; }; n=$i; done; echo $n"
	first, errOut, exit := m.sh(t, forks[0], check)
	if exit.Code != 0 {
		t.Fatalf("inconsistent copy: %s %s", first, errOut)
	}
	// The copy's writer carries on from where it was saved.
	second, _, _ := m.sh(t, forks[0], "sleep 0.5; "+check)
	a, _ := strconv.Atoi(strings.TrimSpace(first))
	b, _ := strconv.Atoi(strings.TrimSpace(second))
	if a < 20 || b <= a {
		t.Fatalf("journal in the copy went from %d to %d; want at least 20 and growing", a, b)
	}
}

// TestExecDuringCheckpoint: a command or copy sent while the sandbox's
// agent is closed for a checkpoint waits for it instead of failing.
// (One already streaming when the checkpoint starts loses its stream; see
// README.)
func TestExecDuringCheckpoint(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	r := lookupT(t, m, src.ID)
	sn, spec := r.be.(backend.Snapshotter), r.spec
	closed, release := make(chan struct{}), make(chan struct{})
	saved := make(chan error, 1)
	go func() {
		saved <- sn.Checkpoint(ctx, &spec, t.TempDir(), backend.CheckpointOptions{LeaveRunning: true, Saved: func() {
			close(closed)
			<-release
		}})
	}()
	<-closed
	type result struct {
		out string
		err error
	}
	execd, copied := make(chan result, 1), make(chan error, 1)
	go func() {
		var out bytes.Buffer
		_, err := m.Exec(ctx, src.ID, sandbox.Process{Args: []string{"echo", "ok"}}, sandbox.Stdio{Stdout: &out})
		execd <- result{out.String(), err}
	}()
	go func() { copied <- m.GetArchive(ctx, src.ID, "/etc/machine-id", io.Discard) }()
	select {
	case r := <-execd:
		t.Fatalf("exec returned while the agent was closed: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	if r := <-execd; r.err != nil || r.out != "ok\n" {
		t.Fatalf("exec sent during the checkpoint: %+v", r)
	}
	if err := <-copied; err != nil {
		t.Fatalf("copy sent during the checkpoint: %v", err)
	}
}

func TestSnapshotBadInput(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	count := func() int {
		sbs, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(sbs)
	}

	if _, err := m.Checkpoint(ctx, "nope", sandbox.CheckpointOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("checkpoint of a missing sandbox: %v", err)
	}
	if _, err := m.Fork(ctx, "nope", sandbox.ForkOptions{N: 1}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("fork of a missing sandbox: %v", err)
	}
	if _, err := m.Restore(ctx, "nope", sandbox.RestoreOptions{}); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("restore of a missing snapshot: %v", err)
	}
	stopped := m.run(t, sandbox.Config{})
	if _, err := m.Stop(ctx, stopped.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Checkpoint(ctx, stopped.ID, sandbox.CheckpointOptions{}); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("checkpoint of a stopped sandbox: %v", err)
	}
	if _, err := m.Pause(ctx, stopped.ID); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("pause of a stopped sandbox: %v", err)
	}

	src := m.run(t, sandbox.Config{})
	if _, err := m.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1}); !errors.Is(err, sandbox.ErrNotRunning) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("fork of a paused sandbox: %v", err)
	}
	if _, err := m.Resume(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, 0, sandbox.MaxFork + 1} {
		if _, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: n}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("fork -n %d: %v", n, err)
		}
	}
	if _, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "../x"}); !errors.Is(err, snapshot.ErrInvalidName) {
		t.Errorf("checkpoint --name ../x: %v", err)
	}

	// Copy 2 of 3 cannot take its name: the others are rolled back.
	taken := m.run(t, sandbox.Config{})
	if _, err := m.Create(ctx, sandbox.CreateOptions{Name: "p-2"}); err != nil {
		t.Fatal(err)
	}
	before := count()
	_, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 3, NamePrefix: "p"})
	if !errors.Is(err, sandbox.ErrNameInUse) || !strings.Contains(err.Error(), "copy 2 of 3") {
		t.Fatalf("fork with a taken name: %v", err)
	}
	if n := count(); n != before {
		t.Fatalf("%d sandboxes after the failed fork, want %d", n, before)
	}
	if _, err := m.Get(ctx, "p-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("p-1 survived the rollback: %v", err)
	}
	_ = taken

	// A corrupt snapshot is refused before anything starts.
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(m.dir, "snapshots", strings.TrimPrefix(snap.ID, "sha256:"), filepath.FromSlash(snap.Files[0].Name))
	if err := os.Truncate(victim, snap.Files[0].Size/2); err != nil {
		t.Fatal(err)
	}
	before = count()
	if _, err := m.Restore(ctx, "c", sandbox.RestoreOptions{Name: "half"}); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("restore of a truncated snapshot: %v", err)
	}
	if n := count(); n != before {
		t.Fatalf("the refused restore left a sandbox: %d, want %d", n, before)
	}
	if out, _, _ := m.sh(t, src, "echo alive"); out != "alive\n" {
		t.Fatalf("source after all that: %q", out)
	}
}

func TestCheckpointDiskFull(t *testing.T) {
	dir := t.TempDir()
	snaps := filepath.Join(dir, "snapshots")
	if err := os.MkdirAll(snaps, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", snaps, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(snaps, unix.MNT_DETACH) })
	m := openManager(t, dir)
	ctx := context.Background()
	src := m.run(t, sandbox.Config{})
	// 32 MiB of touched memory cannot fit in 4 MiB.
	if _, errOut, exit := m.sh(t, src, "head -c 33554432 /dev/urandom > /tmp/big"); exit.Code != 0 {
		t.Fatal(errOut)
	}
	_, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{Name: "full"})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("checkpoint onto a full disk: %v", err)
	}
	if list, _ := m.snaps.List(ctx); len(list) != 0 {
		t.Fatalf("a failed checkpoint is listed: %+v", list)
	}
	entries, _ := os.ReadDir(snaps)
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("left in the store: %s", e.Name())
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(snaps, &fs); err != nil {
		t.Fatal(err)
	}
	if used := (fs.Blocks - fs.Bfree) * uint64(fs.Bsize); used > 64<<10 {
		t.Errorf("%d bytes still used after the failed checkpoint", used)
	}
	if out, _, _ := m.sh(t, src, "wc -c < /tmp/big"); out != "33554432\n" {
		t.Fatalf("source after the failed checkpoint: %q", out)
	}
}

func TestPauseStopsCPU(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{})
	m.sh(t, sb, "(while :; do :; done) >/dev/null 2>&1 &")
	cpu := func() time.Duration {
		st, err := m.Stats(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(st.CPUNanos)
	}
	if _, err := m.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get(ctx, sb.ID); got.State != sandbox.StatePaused {
		t.Fatalf("state %s after pause", got.State)
	}
	before := cpu()
	time.Sleep(500 * time.Millisecond)
	if used := cpu() - before; used > 20*time.Millisecond {
		t.Fatalf("a paused sandbox used %s of CPU in 500ms", used)
	}
	if _, err := m.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// A resumed loop takes a core on an idle host; a loaded one may give
	// it a sliver, so wait up to 10 s for 100 ms of CPU.
	before = cpu()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		used := cpu() - before
		if used >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy loop used only %s of CPU in 10s after resume", used)
		}
	}
}
