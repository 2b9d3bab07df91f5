package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
)

func TestMainCommandLifecycle(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Name: "job", Start: true, Config: sandbox.Config{
		Cmd: []string{"sh", "-c", "echo to-out; echo to-err >&2; exit 3"},
		Env: []string{"A=1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := m.Logs(ctx, sb.ID, sandbox.LogOptions{Follow: true, Stdout: &out, Stderr: &errb}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "to-out\n" || errb.String() != "to-err\n" {
		t.Fatalf("logs: stdout %q stderr %q", out.String(), errb.String())
	}
	got, err := m.Get(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != sandbox.StateStopped || got.ExitCode == nil || *got.ExitCode != 3 || got.Reason != "exited" {
		t.Fatalf("after exit: %+v", got)
	}
	// A stopped sandbox can start again, and its command runs again.
	if _, err := m.Start(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	m.Logs(ctx, sb.ID, sandbox.LogOptions{Follow: true, Stdout: &out})
	if out.String() != "to-out\n" {
		t.Fatalf("second run logs %q", out.String())
	}
	if err := m.Remove(ctx, "job", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "job"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after rm: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.dir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
		t.Fatalf("sandbox dir left after rm: %v", err)
	}
}

func TestExecStreamsAndFiles(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{Env: []string{"FROM_CREATE=yes"}, WorkDir: "/tmp"})

	var out bytes.Buffer
	exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", "pwd; echo $FROM_CREATE $FROM_EXEC; id -u; cat"}, Env: []string{"FROM_EXEC=too"}, User: "1000"},
		sandbox.Stdio{Stdin: strings.NewReader("piped\n"), Stdout: &out})
	if err != nil || exit.Code != 0 {
		t.Fatalf("exec: %v %+v", err, exit)
	}
	if want := "/tmp\nyes too\n1000\npiped\n"; out.String() != want {
		t.Fatalf("exec output %q, want %q", out.String(), want)
	}

	// A PTY: the command sees a terminal of the requested size.
	out.Reset()
	exit, err = m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", "test -t 0 && stty size"}, TTY: true, Size: &sandbox.Size{Rows: 33, Cols: 101}}, sandbox.Stdio{Stdout: &out})
	if err != nil || exit.Code != 0 || !strings.Contains(out.String(), "33 101") {
		t.Fatalf("tty exec: %v %+v %q", err, exit, out.String())
	}

	// Timeouts kill the command and say so.
	exit, err = m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sleep", "30"}, TimeoutMS: 200}, sandbox.Stdio{})
	if err != nil || !exit.TimedOut || exit.Code != 137 {
		t.Fatalf("timeout: %v %+v", err, exit)
	}

	// cp in both directions, a tree with a symlink.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d/sub"), 0o755)
	os.WriteFile(filepath.Join(src, "d/sub/f.txt"), []byte("payload"), 0o640)
	os.Symlink("sub/f.txt", filepath.Join(src, "d/link"))
	if err := m.CopyIn(ctx, sb.ID, filepath.Join(src, "d"), "/root/"); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := m.sh(t, sb, "cat /root/d/link; stat -c %a /root/d/sub/f.txt"); o != "payload640\n" {
		t.Fatalf("after cp in: %q", o)
	}
	m.sh(t, sb, "echo made-inside > /root/d/new")
	dst := filepath.Join(t.TempDir(), "back")
	if err := m.CopyOut(ctx, sb.ID, "/root/d", dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "new")); string(b) != "made-inside\n" {
		t.Fatalf("cp out: %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "link")); l != "sub/f.txt" {
		t.Fatalf("symlink came back as %q", l)
	}
	if err := m.CopyOut(ctx, sb.ID, "/no/such/file", dst); err == nil {
		t.Fatal("cp of a missing file succeeded")
	}
}

func TestLimits(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()

	t.Run("disk full is ENOSPC inside, host untouched", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{Limits: sandbox.Limits{Disk: 32 << 20}})
		var before syscall.Statfs_t
		syscall.Statfs(m.dir, &before)
		out, _, exit := m.sh(t, sb, "dd if=/dev/zero of=/root/fill bs=1M count=200 2>&1")
		if exit.Code == 0 || !strings.Contains(out, "No space left on device") {
			t.Fatalf("filling the disk: exit %+v, %q", exit, out)
		}
		var after syscall.Statfs_t
		syscall.Statfs(m.dir, &after)
		used := (int64(before.Bfree) - int64(after.Bfree)) * before.Bsize
		if used > 64<<20 {
			t.Fatalf("host disk lost %d MiB to a 32 MiB sandbox disk", used>>20)
		}
		if _, _, exit := m.sh(t, sb, "rm /root/fill && echo ok > /root/again"); exit.Code != 0 {
			t.Fatal("sandbox unusable after its disk filled")
		}
	})

	t.Run("fork bomb hits the pids limit, host stays responsive", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{Limits: sandbox.Limits{Pids: 64}})
		done := make(chan struct{})
		var worst time.Duration
		go func() {
			defer close(done)
			for i := 0; i < 30; i++ {
				t0 := time.Now()
				exec.Command("true").Run()
				worst = max(worst, time.Since(t0))
				time.Sleep(50 * time.Millisecond)
			}
		}()
		// Once the bomb has eaten the limit nothing in the workload can
		// fork, so the observer is started first and only reads files.
		var out, errOut bytes.Buffer
		exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"python3", "-c", `
import os, signal, subprocess, time
subprocess.Popen(["sh", "-c", "bomb() { bomb | bomb & }; bomb"], stderr=subprocess.DEVNULL)
# The bomb reaches the limit within a second on an idle host; allow a
# loaded one 20.
for _ in range(200):
    time.sleep(0.1)
    hits = open("/sys/fs/cgroup/workload/pids.events").read().split()[1]
    if int(hits) > 0:
        break
cur = open("/sys/fs/cgroup/workload/pids.current").read().split()[0]
# One kill misses the shells forked while it runs: kill until only this
# process is left in the workload. Killed tasks stay in pids.current for
# a moment after the last one is gone from kill's view, which then fails
# with ESRCH.
for _ in range(250):
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if int(open("/sys/fs/cgroup/workload/pids.current").read()) <= 1:
        break
    time.sleep(0.02)
print(cur, hits)
`}}, sandbox.Stdio{Stdout: &out, Stderr: &errOut})
		<-done
		if err != nil || exit.Code != 0 {
			t.Fatalf("observer: %v %+v\n%s", err, exit, errOut.String())
		}
		var current, hits int
		if _, err := fmt.Sscan(out.String(), &current, &hits); err != nil {
			t.Fatalf("output %q: %v", out.String(), err)
		}
		if current > 64 || hits == 0 {
			t.Fatalf("pids limit 64: %d tasks in the workload, limit hit %d times", current, hits)
		}
		if worst > 2*time.Second {
			t.Fatalf("host stalled %s during the fork bomb", worst)
		}
		// The agent was outside the limit all along: with the bomb gone,
		// exec works again, once the killed tasks are reaped (which takes
		// a while on a loaded host).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			_, _, exit := m.sh(t, sb, "true")
			if exit.Code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("exec after fork bomb: %+v", exit)
			}
		}
	})

	t.Run("memory hog is OOM-killed and exec says so", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{Limits: sandbox.Limits{Memory: 256 << 20}})
		exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"python3", "-c", "x = bytearray(1 << 30); print(len(x))"}}, sandbox.Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		if exit.Code != 137 || !strings.Contains(exit.Error, "out of memory") {
			t.Fatalf("memory hog: %+v", exit)
		}
		got, _ := m.Get(ctx, sb.ID)
		if got.State != sandbox.StateStopped || !strings.Contains(got.Reason, "out of memory") {
			t.Fatalf("record after OOM: %+v", got)
		}
	})

	t.Run("resident memory counts what processes hold", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{})
		before, err := m.Stats(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		m.sh(t, sb, holdMemory(64))
		after, _ := m.Stats(ctx, sb.ID)
		if grown := after.ResidentBytes - before.ResidentBytes; grown < 60<<20 || after.MemoryBytes < after.ResidentBytes {
			t.Fatalf("holding 64 MiB grew resident memory by %d bytes (%+v)", grown, after)
		}
	})

	t.Run("cpu limit holds", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{Limits: sandbox.Limits{CPUs: 0.5}})
		before, err := m.Stats(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		m.sh(t, sb, "for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait")
		after, _ := m.Stats(ctx, sb.ID)
		cores := float64(after.CPUNanos-before.CPUNanos) / float64(time.Since(t0).Nanoseconds())
		if cores > 0.65 {
			t.Fatalf("two busy loops used %.2f cores under a 0.5 limit", cores)
		}
		if cores < 0.2 {
			t.Fatalf("busy loops used only %.2f cores: the measurement is broken", cores)
		}
	})
}

func TestOCIImage(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	hello := testimage.Idle(t)
	base := layer(t, file{"bin/", 0o755, nil}, file{"bin/hello", 0o755, hello}, file{"etc/", 0o755, nil},
		file{"etc/msg", 0o644, []byte("base")}, file{"etc/gone", 0o644, []byte("x")})
	top := layer(t, file{"etc/", 0o755, nil}, file{"etc/msg", 0o644, []byte("top")}, file{"etc/.wh.gone", 0o644, nil})
	img := m.importImage(t, "smolvm.local/hello:1", []string{"/bin/hello", "/etc/msg", "/etc/gone"}, base, top)
	if len(img.Layers) != 2 {
		t.Fatalf("layers: %v", img.Layers)
	}
	sb, err := m.Create(ctx, sandbox.CreateOptions{Image: "smolvm.local/hello:1", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	m.Logs(ctx, sb.ID, sandbox.LogOptions{Follow: true, Stdout: &out})
	if want := "/etc/msg: top\n/etc/gone: open /etc/gone: no such file or directory\n"; out.String() != want {
		t.Fatalf("image command output %q, want %q", out.String(), want)
	}
	got, _ := m.Get(ctx, sb.ID)
	if got.ExitCode == nil || *got.ExitCode != 0 || got.ImageID != img.ID {
		t.Fatalf("record: %+v", got)
	}
	inUse, err := ImageInUse(ctx, m.st, img.ID)
	if err != nil || !inUse {
		t.Fatalf("ImageInUse = %v, %v", inUse, err)
	}
}

// TestBadInput: each mistake gets a clear error and changes nothing.
// TestLookupIDBeforeName names a sandbox like another's ID (names may be
// 12 hex digits): the ID still reaches its own sandbox. SQLite read the
// name's index first, so the name won, and with it whoever chose it (an
// E2B token holder reached the namesake).
func TestLookupIDBeforeName(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	first, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namesake, err := m.Create(ctx, sandbox.CreateOptions{Name: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{first.ID: first.ID, namesake.ID: namesake.ID} {
		if got, err := m.Get(ctx, ref); err != nil || got.ID != want {
			t.Errorf("Get(%s): %+v %v, want %s", ref, got, err, want)
		}
	}
}

func TestBadInput(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	m.run(t, sandbox.Config{}) // one sandbox, to see that nothing else appears
	stopped, err := m.Create(ctx, sandbox.CreateOptions{Name: "stopped", Start: true, Config: sandbox.Config{Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	m.Logs(ctx, stopped.ID, sandbox.LogOptions{Follow: true})
	running := m.run(t, sandbox.Config{})
	before := summary(t, m)

	cases := []struct {
		name string
		do   func() error
		want error
		msg  string
	}{
		{"unknown image", func() error { _, err := m.Create(ctx, sandbox.CreateOptions{Image: "nosuch:1"}); return err }, image.ErrNotFound, "nosuch"},
		{"bad image reference", func() error { _, err := m.Create(ctx, sandbox.CreateOptions{Image: "UPPER/Case::x"}); return err }, image.ErrInvalidRef, ""},
		{"name taken", func() error { _, err := m.Create(ctx, sandbox.CreateOptions{Name: "stopped"}); return err }, sandbox.ErrNameInUse, "stopped"},
		{"bad name", func() error { _, err := m.Create(ctx, sandbox.CreateOptions{Name: "../x"}); return err }, sandbox.ErrInvalid, "name"},
		{"tiny memory", func() error {
			_, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Limits: sandbox.Limits{Memory: 1024}}})
			return err
		}, sandbox.ErrInvalid, "--memory"},
		{"negative cpus", func() error {
			_, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Limits: sandbox.Limits{CPUs: -1}}})
			return err
		}, sandbox.ErrInvalid, "--cpus"},
		{"too many cpus", func() error {
			_, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Limits: sandbox.Limits{CPUs: 4096}}})
			return err
		}, sandbox.ErrInvalid, "--cpus"},
		{"tiny disk", func() error {
			_, err := m.Create(ctx, sandbox.CreateOptions{Config: sandbox.Config{Limits: sandbox.Limits{Disk: 1}}})
			return err
		}, sandbox.ErrInvalid, "--disk"},
		{"exec into stopped", func() error {
			_, err := m.Exec(ctx, "stopped", sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
			return err
		}, sandbox.ErrNotRunning, "stopped"},
		{"exec into missing", func() error {
			_, err := m.Exec(ctx, "ghost", sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
			return err
		}, sandbox.ErrNotFound, "ghost"},
		{"rm running without force", func() error { return m.Remove(ctx, running.ID, false) }, sandbox.ErrState, "-f"},
		{"start running", func() error { _, err := m.Start(ctx, running.ID); return err }, sandbox.ErrState, "running"},
		{"image command missing", func() error {
			m.importImage(t, "smolvm.local/broken:1", []string{"/bin/missing"}, layer(t, file{"bin/", 0o755, nil}))
			_, err := m.Create(ctx, sandbox.CreateOptions{Image: "smolvm.local/broken:1", Name: "broken", Start: true})
			var se *sandbox.StartError
			if !errors.As(err, &se) || se.Exit.Code != 127 {
				return fmt.Errorf("want a StartError with exit 127, got %v", err)
			}
			return fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)
		}, sandbox.ErrInvalid, "exit 127"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v mentioning %q", err, c.want, c.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	if after := summary(t, m); after != before {
		t.Fatalf("bad input changed state:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshot summarizes sandboxes and their directories.
func summary(t *testing.T, m *testManager) string {
	sbs, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, sb := range sbs {
		fmt.Fprintf(&b, "%s=%s ", sb.Name, sb.State)
	}
	dirs, _ := os.ReadDir(filepath.Join(m.dir, "sandboxes"))
	fmt.Fprintf(&b, "dirs=%d", len(dirs))
	return b.String()
}

func TestParallelCreate(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := m.Create(ctx, sandbox.CreateOptions{Name: fmt.Sprintf("p%d", i), Start: true, Config: sandbox.Config{Limits: sandbox.Limits{Memory: 256 << 20}}})
			if err != nil {
				errs <- err
				return
			}
			var out bytes.Buffer
			exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"hostname"}}, sandbox.Stdio{Stdout: &out})
			if err != nil || exit.Code != 0 || out.String() != sb.Name+"\n" {
				errs <- fmt.Errorf("%s: %v %+v %q", sb.Name, err, exit, out.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sbs, _ := m.List(ctx)
	running := 0
	for _, sb := range sbs {
		if sb.State == sandbox.StateRunning {
			running++
		}
	}
	if running != n {
		t.Fatalf("%d of %d running", running, n)
	}
}

// TestCrashDuringForkIntoTargets kills real smolvm processes at points
// through a fork into a pool's restore targets. The source keeps serving,
// every copy listed running works, and gc removes the targets taken by a
// fork that never finished.
func TestCrashDuringForkIntoTargets(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	m.filledPool(t, sandbox.PoolOptions{Name: "t", Targets: 12})
	src := m.run(t, sandbox.Config{})
	for i, delay := range []time.Duration{5, 40, 80, 150} {
		m.killAfter(t, delay*time.Millisecond, nil, "fork", src.ID, "-n", "2", "--name-prefix", fmt.Sprintf("crash%d", i))
		// A fork killed between quiesce and resume leaves the source's
		// agent waiting for an identity nobody writes: it serves again,
		// as itself, after its quiesce timeout.
		wctx, cancel := context.WithTimeout(ctx, guest.DefaultQuiesceTimeout+5*time.Second)
		r := lookupT(t, m, src.ID)
		err := r.be.Guest(&r.spec).Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("source after a fork killed at %v: %v", delay*time.Millisecond, err)
		}
		if out, errOut, exit := m.sh(t, src, "echo ok"); out != "ok\n" {
			t.Fatalf("source after a fork killed at %v: %q %q %+v", delay*time.Millisecond, out, errOut, exit)
		}
	}
	sbs := m.afterGC(t)
	for _, sb := range sbs {
		switch sb.State {
		case sandbox.StateRunning:
			if out, _, _ := m.sh(t, sb, "echo ok"); out != "ok\n" {
				t.Fatalf("%s listed running but unusable", sb.Name)
			}
		default:
			t.Fatalf("after gc, %s is %s", sb.Name, sb.State)
		}
	}
	if p, err := m.Pool(ctx, "t"); err != nil || p.TargetsReady+len(sbs)-1 > 12 {
		t.Fatalf("pool after the crashes: %+v, %v", p, err)
	}
}

func lookupT(t *testing.T, m *testManager, id string) *record {
	t.Helper()
	r, err := m.lookup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCrashDuringCreate kills real smolvm processes at points through a
// create. Whatever the moment, the result is a usable sandbox or nothing,
// ls never shows a ghost as running, and gc leaves no trace.
func TestCrashDuringCreate(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	for i, delay := range []time.Duration{5, 30, 80, 150, 250, 400} {
		m.killAfter(t, delay*time.Millisecond, nil, "run", "-d", "--name", fmt.Sprintf("crash%d", i))
	}
	sbs, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State == sandbox.StateRunning {
			var out bytes.Buffer
			exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{Stdout: &out})
			if err != nil || exit.Code != 0 {
				t.Fatalf("%s listed running but unusable: %v %+v", sb.Name, err, exit)
			}
		}
	}
	keep := map[string]bool{}
	sbs = m.afterGC(t)
	for _, sb := range sbs {
		if sb.State == sandbox.StateCreating {
			t.Fatalf("gc left orphan %s", sb.Name)
		}
		keep[sb.ID] = true
		if err := m.Remove(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(m.dir, "sandboxes"))
	if len(dirs) != 0 {
		t.Fatalf("directories left: %v", dirs)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(m.dir)) {
		t.Fatal("mounts left under the data dir")
	}
	if out, _ := exec.Command("pgrep", "-f", m.dir).Output(); len(out) > 0 {
		t.Fatalf("processes left: %s", out)
	}
}

// TestStartOldSpec starts a stopped sandbox whose stored spec an earlier
// smolvm wrote: the root filesystem as overlay directories, and the guest
// binary under its old name. Start renews both from this host.
func TestStartOldSpec(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{})
	if _, err := m.Stop(ctx, sb.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := m.st.DB().QueryRowContext(ctx, `SELECT spec FROM sandboxes WHERE id = ?`, sb.ID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	spec["Rootfs"] = map[string]any{"LowerDirs": []string{"/nonexistent/layer"}}
	spec["AgentBinary"] = spec["GuestBinary"]
	delete(spec, "GuestBinary")
	old, _ := json.Marshal(spec)
	if _, err := m.st.DB().ExecContext(ctx, `UPDATE sandboxes SET spec = ? WHERE id = ?`, string(old), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, sb.ID); err != nil {
		t.Fatalf("start with an old spec: %v", err)
	}
	if out, _, exit := m.sh(t, sb, "echo up"); out != "up\n" || exit.Code != 0 {
		t.Fatalf("exec after start: %q %+v", out, exit)
	}
}
