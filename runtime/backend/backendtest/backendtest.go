// Package backendtest is the conformance suite every backend.Backend
// passes: Run drives a backend through what the manager relies on, and a
// backend that is also a backend.Snapshotter through checkpoint, restore,
// fork and pause.
package backendtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/archive"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// Harness is a backend under test and what its sandboxes need.
type Harness struct {
	Backend backend.Backend
	// Rootfs holds a POSIX sh and the usual tools (cat, echo, sleep, seq,
	// hostname, tail), with /etc/passwd a regular file, /root and /tmp.
	Rootfs backend.Rootfs
	// GuestBinary is the smolvm-guest run as each sandbox's PID 1.
	GuestBinary string
	// MemoryFiles name files in a sandbox's dir that back its memory
	// (the VM's RAM file): they grow with the guest's page cache, not
	// with its disk, so DiskLimit does not count them (dd of 32 MiB into
	// a VM took 32 MiB of disk plus 24-37 MiB of RAM file).
	MemoryFiles []string
}

// Run runs the suite. newHarness is called once per test, with that
// test's t, so what it makes may be cleaned up with the test.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Exec", testExec},
		{"Files", testFiles},
		{"MainExitAndLog", testMainExitAndLog},
		{"MainNotFound", testMainNotFound},
		{"FollowLog", testFollowLog},
		{"Signal", testSignal},
		{"States", testStates},
		{"HalfMade", testHalfMade},
		{"Restart", testRestart},
		{"DiskLimit", testDiskLimit},
		{"MemoryLimit", testMemoryLimit},
		{"PidsLimit", testPidsLimit},
		{"CheckpointRestoreFork", testCheckpointRestoreFork},
		{"CheckpointStops", testCheckpointStops},
		{"PauseResume", testPauseResume},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t)) })
	}
}

// newSpec returns the spec of a new idle sandbox, to adjust before use.
func newSpec(t *testing.T, h Harness) *backend.Spec {
	id := make([]byte, 6)
	rand.Read(id)
	s := &backend.Spec{
		ID: "bt-" + hex.EncodeToString(id), Hostname: "sb",
		Rootfs:      h.Rootfs,
		Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hi"},
		GuestBinary: h.GuestBinary,
		MachineID:   hex.EncodeToString(append(id, make([]byte, 10)...)),
	}
	s.Dir = filepath.Join(t.TempDir(), s.ID)
	t.Cleanup(func() { h.Backend.Delete(context.Background(), s) })
	return s
}

// run starts s with Run.
func run(t *testing.T, h Harness, s *backend.Spec) {
	t.Helper()
	if err := h.Backend.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// runIdle starts a new idle sandbox.
func runIdle(t *testing.T, h Harness) *backend.Spec {
	t.Helper()
	s := newSpec(t, h)
	run(t, h, s)
	return s
}

// sh runs script in s and returns stdout, stderr and the exit.
func sh(t *testing.T, h Harness, s *backend.Spec, script string) (string, string, sandbox.Exit) {
	t.Helper()
	return execIn(t, h, s, sandbox.Process{Args: []string{"sh", "-c", script}}, nil)
}

func execIn(t *testing.T, h Harness, s *backend.Spec, p sandbox.Process, stdin io.Reader) (string, string, sandbox.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := h.Backend.Exec(ctx, s, p, sandbox.Stdio{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", p.Args, err)
	}
	return out.String(), errb.String(), exit
}

// state returns s's status, failing the test on error.
func state(t *testing.T, h Harness, s *backend.Spec) backend.Status {
	t.Helper()
	st, err := h.Backend.State(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState waits up to timeout for s to reach want.
func waitState(t *testing.T, h Harness, s *backend.Spec, want backend.Status, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		st := state(t, h, s)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s after %s, want %s", st, timeout, want)
		}
	}
}

// mainExit returns how s's main process ended, failing if it has not.
func mainExit(t *testing.T, h Harness, s *backend.Spec) *backend.Exit {
	t.Helper()
	e, err := h.Backend.MainExit(context.Background(), s)
	if err != nil || e == nil {
		t.Fatalf("main exit: %+v, %v", e, err)
	}
	return e
}

// mainLog reads s's main-process log to its end.
func mainLog(t *testing.T, h Harness, s *backend.Spec, follow bool) (stdout, stderr string) {
	t.Helper()
	// Following a created sandbox includes its boot: a VM under TCG on
	// a loaded host took over 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stdout, stderr, err := readLog(ctx, h, s, follow)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("main log did not end")
	}
	return stdout, stderr
}

// readLog reads s's main-process log until it ends.
func readLog(ctx context.Context, h Harness, s *backend.Spec, follow bool) (stdout, stderr string, err error) {
	r, err := h.Backend.MainLog(ctx, s, follow)
	if err != nil {
		return "", "", err
	}
	defer r.Close()
	var out, errb strings.Builder
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return out.String(), errb.String(), nil
		}
		if err != nil {
			return "", "", fmt.Errorf("main log: %w (line %q)", err, line)
		}
		var e guest.LogEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return "", "", fmt.Errorf("main log line %q: %w", line, err)
		}
		w := &out
		if e.Stream == "stderr" {
			w = &errb
		}
		w.Write(e.Bytes())
	}
}

func testExec(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.WorkDir = "/tmp"
	run(t, h, s)
	out, errOut, exit := sh(t, h, s, "echo out $GREETING $FROM_EXEC; pwd; hostname; echo err >&2; exit 3")
	if out != "out hi\n/tmp\nsb\n" || errOut != "err\n" || exit.Code != 3 {
		t.Fatalf("got out=%q err=%q exit=%+v", out, errOut, exit)
	}
	out, _, _ = execIn(t, h, s, sandbox.Process{Args: []string{"sh", "-c", "echo $FROM_EXEC; id -u"}, Env: []string{"FROM_EXEC=yes"}, User: "1000"}, nil)
	if out != "yes\n1000\n" {
		t.Fatalf("exec env and user: %q", out)
	}
	if out, _, _ := execIn(t, h, s, sandbox.Process{Args: []string{"cat"}}, strings.NewReader("from stdin")); out != "from stdin" {
		t.Fatalf("stdin round trip: %q", out)
	}
	if _, _, exit := execIn(t, h, s, sandbox.Process{Args: []string{"no-such-command"}}, nil); exit.Code != 127 || exit.Kind != sandbox.KindNotFound {
		t.Fatalf("missing command: %+v", exit)
	}
	if _, _, exit := execIn(t, h, s, sandbox.Process{Args: []string{"/etc/passwd"}}, nil); exit.Code != 126 || exit.Kind != sandbox.KindCannotRun {
		t.Fatalf("non-executable: %+v", exit)
	}
	if _, _, exit := sh(t, h, s, "kill -9 $$"); exit.Code != 137 || exit.Signal != 9 {
		t.Fatalf("killed exec: %+v", exit)
	}
	// Root's commands lack CAP_SYS_ADMIN, in every set: they cannot
	// rename the sandbox (only the agent does, for a copy).
	out, _, _ = sh(t, h, s, "hostname evil 2>/dev/null; hostname; grep -E '^Cap(Prm|Eff|Bnd):' /proc/self/status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "sb" {
		t.Fatalf("hostname and capabilities of a root command: %q", out)
	}
	for _, l := range lines[1:] {
		var set uint64
		if _, err := fmt.Sscanf(strings.Fields(l)[1], "%x", &set); err != nil || set&(1<<21) != 0 {
			t.Errorf("a root command has CAP_SYS_ADMIN (bit 21): %q", l)
		}
	}
}

func testFiles(t *testing.T, h Harness) {
	s := runIdle(t, h)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "a"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "b"), []byte("beta"), 0o755)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.WriteTar(pw, src)) }()
	if err := h.Backend.Guest(s).Put(ctx, "/root/in", pr); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := sh(t, h, s, "cat /root/in/a /root/in/sub/b; test -x /root/in/sub/b && echo x; echo made > /root/in/c"); out != "alphabetax\n" {
		t.Fatalf("inside after put: %q", out)
	}
	var tarball bytes.Buffer
	if err := h.Backend.Guest(s).Get(ctx, "/root/in", &tarball); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archive.ExtractTar(&tarball, dst, 0); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "alpha", "sub/b": "beta", "c": "made\n"} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Errorf("%s after get: %q, %v", name, got, err)
		}
	}
	if err := h.Backend.Guest(s).Get(ctx, "/no/such/path", io.Discard); err == nil {
		t.Error("get of a missing path succeeded")
	}
}

func testMainExitAndLog(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Main = &sandbox.Process{Args: []string{"sh", "-c", "echo to-out; echo to-err >&2; exit 3"}}
	if e, err := h.Backend.MainExit(context.Background(), s); e != nil || err != nil {
		t.Fatalf("exit before the sandbox exists: %+v, %v", e, err)
	}
	t0 := time.Now()
	run(t, h, s)
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
	if e := mainExit(t, h, s); e.Code != 3 || e.Kind != "" || e.At.Before(t0.Add(-time.Second)) || e.At.After(time.Now()) {
		t.Fatalf("main exit %+v (started at %s)", e, t0)
	}
	if out, errOut := mainLog(t, h, s, false); out != "to-out\n" || errOut != "to-err\n" {
		t.Fatalf("main log: stdout %q stderr %q", out, errOut)
	}
}

func testMainNotFound(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Main = &sandbox.Process{Args: []string{"no-such-command"}}
	run(t, h, s)
	if e := mainExit(t, h, s); e.Code != 127 || e.Kind != sandbox.KindNotFound {
		t.Fatalf("main exit %+v", e)
	}
}

func testFollowLog(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Main = &sandbox.Process{Args: []string{"sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.3; done"}}
	if err := h.Backend.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	// Following a created sandbox waits for it to start.
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := h.Backend.Start(context.Background(), s); err != nil {
			t.Error(err)
		}
	}()
	if out, _ := mainLog(t, h, s, true); out != "1\n2\n3\n" {
		t.Fatalf("followed log %q", out)
	}
	if st := state(t, h, s); st != backend.StatusStopped {
		t.Fatalf("follow ended with the sandbox %s", st)
	}
	// A follower ends with its context.
	idle := runIdle(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if out, errOut, err := readLog(ctx, h, idle, true); out != "" || errOut != "" || err != nil {
		t.Fatalf("following an idle sandbox: %q %q %v", out, errOut, err)
	}
}

func testSignal(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Main = &sandbox.Process{Args: []string{"sleep", "1000"}}
	run(t, h, s)
	if err := h.Backend.Signal(context.Background(), s, syscall.SIGTERM, false); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
	if e := mainExit(t, h, s); e.Signal != int(syscall.SIGTERM) || e.Code != 128+int(syscall.SIGTERM) {
		t.Fatalf("main exit after SIGTERM: %+v", e)
	}

	s = runIdle(t, h)
	if err := h.Backend.Signal(context.Background(), s, syscall.SIGKILL, true); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
}

func testStates(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newSpec(t, h)
	if st := state(t, h, s); st != backend.StatusMissing {
		t.Fatalf("before create: %s", st)
	}
	if err := h.Backend.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := state(t, h, s); st != backend.StatusCreated {
		t.Fatalf("after create: %s", st)
	}
	if err := h.Backend.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := state(t, h, s); st != backend.StatusRunning {
		t.Fatalf("after start: %s", st)
	}
	if stats, err := h.Backend.Stats(ctx, s); err != nil || !stats.ProcessesAlive || stats.MemoryBytes <= 0 {
		t.Fatalf("stats of a running sandbox: %+v, %v", stats, err)
	}
	if err := h.Backend.Guest(s).Ping(ctx); err != nil {
		t.Fatalf("guest of a running sandbox: %v", err)
	}
	for i := range 2 {
		if err := h.Backend.Stop(ctx, s, 5*time.Second); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
		if st := state(t, h, s); st != backend.StatusStopped {
			t.Fatalf("after stop %d: %s", i+1, st)
		}
	}
	if stats, err := h.Backend.Stats(ctx, s); err != nil || stats.ProcessesAlive {
		t.Fatalf("stats of a stopped sandbox: %+v, %v", stats, err)
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := h.Backend.Exec(ectx, s, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); err == nil {
		t.Fatal("exec in a stopped sandbox succeeded")
	}
	for i := range 2 {
		if err := h.Backend.Delete(ctx, s); err != nil {
			t.Fatalf("delete %d: %v", i+1, err)
		}
		if st := state(t, h, s); st != backend.StatusMissing {
			t.Fatalf("after delete %d: %s", i+1, st)
		}
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir left after delete: %v", err)
	}
}

// testHalfMade: stop and delete work, and are idempotent, on sandboxes
// that never got far: never created, created but never started, and
// failed to create.
func testHalfMade(t *testing.T, h Harness) {
	ctx := context.Background()
	never := newSpec(t, h)
	created := newSpec(t, h)
	if err := h.Backend.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	broken := newSpec(t, h)
	broken.Rootfs = backend.Rootfs{}
	if err := h.Backend.Create(ctx, broken); err == nil {
		t.Fatal("create without a root filesystem succeeded")
	}
	for name, s := range map[string]*backend.Spec{"never created": never, "created": created, "failed create": broken} {
		for i := range 2 {
			if err := h.Backend.Stop(ctx, s, time.Second); err != nil {
				t.Errorf("%s: stop %d: %v", name, i+1, err)
			}
			if err := h.Backend.Delete(ctx, s); err != nil {
				t.Errorf("%s: delete %d: %v", name, i+1, err)
			}
			if st := state(t, h, s); st != backend.StatusMissing {
				t.Errorf("%s: after delete %d: %s", name, i+1, st)
			}
		}
		if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
			t.Errorf("%s: dir left after delete: %v", name, err)
		}
	}
}

func testRestart(t *testing.T, h Harness) {
	ctx := context.Background()
	s := newSpec(t, h)
	s.Main = &sandbox.Process{Args: []string{"sh", "-c", "echo run; exit 4"}}
	run(t, h, s)
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
	if err := h.Backend.Restart(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
	if e := mainExit(t, h, s); e.Code != 4 {
		t.Fatalf("main exit after restart: %+v", e)
	}
	// The log is the new run's alone.
	if out, _ := mainLog(t, h, s, false); out != "run\n" {
		t.Fatalf("main log after restart: %q", out)
	}

	idle := runIdle(t, h)
	if err := h.Backend.Stop(ctx, idle, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h.Backend.Restart(ctx, idle); err != nil {
		t.Fatal(err)
	}
	if st := state(t, h, idle); st != backend.StatusRunning {
		t.Fatalf("idle sandbox after restart: %s", st)
	}
	if e, err := h.Backend.MainExit(ctx, idle); e != nil || err != nil {
		t.Fatalf("main exit of a restarted idle sandbox: %+v, %v", e, err)
	}
	if out, _, _ := sh(t, h, idle, "echo back"); out != "back\n" {
		t.Fatalf("exec after restart: %q", out)
	}
}

// testDiskLimit: a full writable layer is ENOSPC inside, and the host
// disk keeps what the sandbox could not write. The host's free space is
// measured (gVisor's layer is a file it unlinks once open), less what the
// files backing the sandbox's memory grew by: a VM's RAM file takes the
// guest's page cache of what dd wrote, which is memory, not disk. Other
// tests writing to the same filesystem at the same moment (CI runs two
// packages at once; a checkpoint writes 120 MB) show as lost space too,
// so the fill is tried up to three times and the smallest loss counts.
func testDiskLimit(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Rootfs.WritableSize = 32 << 20
	run(t, h, s)
	var losses []string
	for attempt := range 3 {
		if attempt > 0 {
			if _, _, exit := sh(t, h, s, "rm /root/fill"); exit.Code != 0 {
				t.Fatalf("removing the fill: %+v", exit)
			}
		}
		var before, after syscall.Statfs_t
		syscall.Statfs(filepath.Dir(s.Dir), &before)
		mem := memoryBytes(t, s.Dir, h.MemoryFiles)
		out, _, exit := sh(t, h, s, "dd if=/dev/zero of=/root/fill bs=1M count=100 2>&1")
		syscall.Statfs(filepath.Dir(s.Dir), &after)
		mem = memoryBytes(t, s.Dir, h.MemoryFiles) - mem
		if exit.Code == 0 || !strings.Contains(out, "No space left on device") {
			t.Fatalf("filling a 32 MiB writable layer: %+v, %q", exit, out)
		}
		used := (int64(before.Bfree)-int64(after.Bfree))*before.Bsize - mem
		t.Logf("the host disk lost %d MiB, the memory files took %d MiB more", used>>20, mem>>20)
		if used <= 64<<20 {
			losses = nil
			break
		}
		losses = append(losses, fmt.Sprintf("%d MiB", used>>20))
	}
	if losses != nil {
		t.Fatalf("the host disk lost %s to a 32 MiB writable layer", strings.Join(losses, ", then "))
	}
	if _, _, exit := sh(t, h, s, "rm /root/fill && echo ok > /root/again"); exit.Code != 0 {
		t.Fatalf("writing after freeing space: %+v", exit)
	}
}

// testMemoryLimit: a process that eats memory past the limit is killed,
// alone (exit 137) or with its sandbox (which then reports an OOM kill).
func testMemoryLimit(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Limits.Memory = 256 << 20
	run(t, h, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// tail keeps the last lines of an endless line.
	exit, err := h.Backend.Exec(ctx, s, sandbox.Process{Args: []string{"tail", "/dev/zero"}}, sandbox.Stdio{})
	switch {
	case err == nil && exit.Code != 137:
		t.Fatalf("memory hog under a 256 MiB limit: %+v", exit)
	case err != nil:
		waitState(t, h, s, backend.StatusStopped, 10*time.Second)
		if stats, err := h.Backend.Stats(context.Background(), s); err != nil || stats.OOMKills == 0 {
			t.Fatalf("the sandbox died without an OOM kill: %+v, %v", stats, err)
		}
	}
}

// testPidsLimit: past the pids limit, fork fails inside the sandbox; the
// guest stays outside the limit and serves on.
func testPidsLimit(t *testing.T, h Harness) {
	s := newSpec(t, h)
	s.Limits.Pids = 16
	run(t, h, s)
	// Only builtins run once the limit is reached: counting and killing
	// must not fork.
	out, _, _ := sh(t, h, s, `(for i in $(seq 40); do sleep 30 & done) 2>/dev/null
echo refused=$?
n=0
for p in /proc/[0-9]*; do
	read c < $p/comm 2>/dev/null || continue
	[ "$c" = sleep ] && n=$((n+1)) && kill -9 ${p#/proc/}
done
echo sleeps=$n`)
	var refused, sleeps int
	if _, err := fmt.Sscanf(out, "refused=%d\nsleeps=%d\n", &refused, &sleeps); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if refused == 0 || sleeps == 0 || sleeps > 16 {
		t.Fatalf("40 forks under a limit of 16: status %d, %d sleeps running", refused, sleeps)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, exit := sh(t, h, s, "true"); exit.Code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exec still fails after the forks were killed")
		}
	}
}

// snapshotter returns h's backend as a Snapshotter, or skips.
func snapshotter(t *testing.T, h Harness) backend.Snapshotter {
	sn, ok := h.Backend.(backend.Snapshotter)
	if !ok {
		t.Skipf("%s is not a backend.Snapshotter", h.Backend.Name())
	}
	return sn
}

// runCounting starts a sandbox with a file in its writable layer and a
// process counting in /tmp/counter: state that lives only in memory.
func runCounting(t *testing.T, h Harness) *backend.Spec {
	t.Helper()
	s := runIdle(t, h)
	if _, _, exit := sh(t, h, s, `echo written > /root/f; (i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.05; done) >/dev/null 2>&1 &`); exit.Code != 0 {
		t.Fatal(exit)
	}
	return s
}

// stillCounting prints "counting" once the counter moves.
const stillCounting = `a=$(cat /tmp/counter); for i in $(seq 100); do sleep 0.1; b=$(cat /tmp/counter); [ $b -gt $a ] 2>/dev/null && echo counting && break; done`

// testCheckpointRestoreFork checkpoints a running sandbox, leaving it
// running, and restores the checkpoint twice (once into a sandbox made
// with Create beforehand): each copy has the source's memory and files
// under its own identity, and the copies diverge.
func testCheckpointRestoreFork(t *testing.T, h Harness) {
	sn := snapshotter(t, h)
	ctx := context.Background()
	src := runCounting(t, h)
	dir := t.TempDir()
	saved := false
	err := sn.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true, Saved: func() {
		saved = true
		if entries, _ := os.ReadDir(dir); len(entries) == 0 {
			t.Error("Saved came before the image was written")
		}
		if h.Backend.Guest(src).Ping(ctx) == nil {
			t.Error("the source serves before Saved")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !saved {
		t.Fatal("Saved was not called")
	}
	if st := state(t, h, src); st != backend.StatusRunning {
		t.Fatalf("source after checkpoint: %s", st)
	}
	if out, _, _ := sh(t, h, src, "cat /root/f"); out != "written\n" {
		t.Fatalf("source after checkpoint: %q", out)
	}
	// Copy 0 is restored cold; copy 1 into a sandbox created beforehand
	// under another hostname, as a restore target is; copy 2 cold from a
	// checkpoint of copy 1, whose hostname its agent set.
	restore := func(i int, dir string, target bool) *backend.Spec {
		c := newSpec(t, h)
		if target {
			c.Hostname = "target"
			if err := h.Backend.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		c.Hostname = fmt.Sprintf("copy%d", i)
		c.Env = append(c.Env, "WHO="+c.Hostname)
		if err := sn.Restore(ctx, c, dir); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		return c
	}
	check := func(i int, c *backend.Spec, when string) {
		out, _, _ := sh(t, h, c, "cat /root/f; hostname; cat /etc/machine-id; echo $WHO; "+stillCounting)
		if want := fmt.Sprintf("written\ncopy%d\n%s\ncopy%d\ncounting\n", i, c.MachineID, i); out != want {
			t.Fatalf("copy %d%s: %q, want %q", i, when, out, want)
		}
	}
	copies := []*backend.Spec{restore(0, dir, false), restore(1, dir, true)}
	check(0, copies[0], "")
	check(1, copies[1], "")
	dir = t.TempDir()
	if err := sn.Checkpoint(ctx, copies[1], dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	copies = append(copies, restore(2, dir, false))
	check(2, copies[2], "")
	check(1, copies[1], " after its own checkpoint")
	if out, _, _ := sh(t, h, src, "hostname"); out != "sb\n" {
		t.Fatalf("source after its copies: hostname %q", out)
	}
	for i, c := range copies {
		sh(t, h, c, fmt.Sprintf("echo %d > /root/f", i))
	}
	for i, c := range copies {
		if out, _, _ := sh(t, h, c, "cat /root/f"); out != fmt.Sprintf("%d\n", i) {
			t.Fatalf("copy %d after the copies wrote: %q", i, out)
		}
	}
	if out, _, _ := sh(t, h, src, "cat /root/f"); out != "written\n" {
		t.Fatalf("source after the copies wrote: %q", out)
	}
}

func testCheckpointStops(t *testing.T, h Harness) {
	sn := snapshotter(t, h)
	s := runIdle(t, h)
	if err := sn.Checkpoint(context.Background(), s, t.TempDir(), backend.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, s, backend.StatusStopped, 10*time.Second)
}

func testPauseResume(t *testing.T, h Harness) {
	sn := snapshotter(t, h)
	ctx := context.Background()
	s := runCounting(t, h)
	if err := sn.Pause(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := state(t, h, s); st != backend.StatusPaused {
		t.Fatalf("after pause: %s", st)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if h.Backend.Guest(s).Ping(pctx) == nil {
		t.Fatal("a paused sandbox's guest answers")
	}
	if err := sn.Resume(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := state(t, h, s); st != backend.StatusRunning {
		t.Fatalf("after resume: %s", st)
	}
	if out, _, _ := sh(t, h, s, stillCounting); out != "counting\n" {
		t.Fatalf("after resume: %q", out)
	}
}

// memoryBytes is the disk space the files named in names under dir take.
func memoryBytes(t *testing.T, dir string, names []string) int64 {
	t.Helper()
	var n int64
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
	}
	return n
}
