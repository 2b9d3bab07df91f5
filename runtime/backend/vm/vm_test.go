package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/guest"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/backendtest"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// testBackend returns one backend per test process, its cache shared by
// every test (the kernel is uncompressed and images built once).
func testBackend(t testing.TB) *Backend {
	t.Helper()
	testenv.Integration(t)
	if os.Geteuid() != 0 {
		t.Skip("VM tests need root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("qemu-system-x86_64 not found in CI: scripts/test.sh installs it")
		}
		t.Skip("qemu-system-x86 not installed")
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "smolvm-vm-cache-")
		if err != nil {
			shared.err = err
			return
		}
		shared.b, shared.err = New(Config{Cache: dir})
		if shared.err == nil {
			println("vm backend: accelerator", shared.b.Accel())
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.b
}

var shared struct {
	once sync.Once
	b    *Backend
	err  error
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		return backendtest.Harness{Backend: testBackend(t), Rootfs: busyboxRoot(t), GuestBinary: testenv.Guest(t), MemoryFiles: []string{filepath.Base(layout{}.ram())}}
	})
}

// busyboxSpec is a sandbox named name of root (busyboxRoot).
func busyboxSpec(t testing.TB, root backend.Rootfs, name string) *backend.Spec {
	return &backend.Spec{ID: name, Hostname: name, Dir: filepath.Join(t.TempDir(), name), GuestBinary: testenv.Guest(t), Rootfs: root, MachineID: strings.Repeat("cd", 16), Env: []string{"PATH=/bin"}}
}

// busyboxRoot builds a root of the host's static busybox: the host's
// /usr is too big to copy into a disk image.
func busyboxRoot(t testing.TB) backend.Rootfs {
	dir := t.TempDir()
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("busybox-static not installed")
	}
	os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755)
	for _, c := range []string{"sh", "cat", "echo", "sleep", "seq", "hostname", "tail", "id", "grep", "dd", "rm", "kill", "test", "pwd", "true", "mkdir", "ls"} {
		os.Symlink("busybox", filepath.Join(dir, "bin", c))
	}
	os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/tmp:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\nsandbox:x:1000:\n"), 0o644)
	return backend.Rootfs{ImageID: "busybox-" + filepath.Base(dir), Layers: []backend.Layer{{Dir: dir}}}
}

func TestChooseAccel(t *testing.T) {
	noKVM := errors.New("open /dev/kvm: no such file or directory")
	for _, tc := range []struct {
		want       string
		kvm        error
		accel, cpu string
		fails      bool
	}{
		{"", nil, AccelKVM, "host", false},
		{"", noKVM, AccelTCG, "max", false},
		{"kvm", nil, AccelKVM, "host", false},
		{"kvm", noKVM, "", "", true},
		{"tcg", nil, AccelTCG, "max", false},
		{"tcg", noKVM, AccelTCG, "max", false},
		{"hvf", nil, "", "", true},
	} {
		accel, cpu, err := chooseAccel(tc.want, tc.kvm)
		if accel != tc.accel || cpu != tc.cpu || (err != nil) != tc.fails {
			t.Errorf("chooseAccel(%q, %v) = %q, %q, %v", tc.want, tc.kvm, accel, cpu, err)
		}
		if tc.want == "kvm" && tc.kvm != nil && !errors.Is(err, errNoKVM) {
			t.Errorf("demanding KVM without it: %v", err)
		}
	}
}

func TestMissingKernel(t *testing.T) {
	_, err := New(Config{Cache: t.TempDir(), Kernel: "/no/such/vmlinuz"})
	if err == nil || !strings.Contains(err.Error(), "/no/such/vmlinuz") {
		t.Fatalf("a missing kernel: %v", err)
	}
}

// TestCorruptCheckpoint: a checkpoint whose files are damaged or missing
// is refused as corrupt, before any VM starts.
func TestCorruptCheckpoint(t *testing.T) {
	b := testBackend(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, snapLaunch), []byte("{not json"), 0o600)
	s := &backend.Spec{ID: "corrupt", Dir: filepath.Join(t.TempDir(), "s"), GuestBinary: testenv.Guest(t), Rootfs: busyboxRoot(t)}
	err := b.Restore(context.Background(), s, dir)
	if !errors.Is(err, ErrLoad) || !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("restore of a damaged checkpoint: %v", err)
	}
	os.WriteFile(filepath.Join(dir, snapLaunch), []byte(`{"Kernel":"/no/kernel"}`), 0o600)
	if err := b.Restore(context.Background(), s, dir); !errors.Is(err, ErrLoad) {
		t.Fatalf("restore of a checkpoint without its files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "qemu.pid")); err == nil {
		t.Fatal("a QEMU was started for a corrupt checkpoint")
	}
}

// TestKilledQEMU: a VM killed from outside shows as stopped, with no
// main exit (nothing recorded one), and its agent as unavailable.
func TestKilledQEMU(t *testing.T) {
	b := testBackend(t)
	s := &backend.Spec{ID: "killed", Hostname: "k", Dir: filepath.Join(t.TempDir(), "s"), GuestBinary: testenv.Guest(t), Rootfs: busyboxRoot(t)}
	ctx := context.Background()
	defer b.Delete(ctx, s)
	if err := b.Run(ctx, s); err != nil {
		t.Fatal(err)
	}
	pid, ok := b.qemu(s)
	if !ok {
		t.Fatal("no QEMU after run")
	}
	killQEMU(t, b, s, pid)
	if e, err := b.MainExit(ctx, s); e != nil || err != nil {
		t.Fatalf("main exit of a killed VM: %+v, %v", e, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Guest(s).Ping(pctx); !errors.Is(err, guest.ErrUnavailable) {
		t.Fatalf("ping of a killed VM: %v", err)
	}
}

// TestStalledBoot: a guest whose agent never answers, spinning instead,
// is given up once QEMU has spent the boot's CPU budget, and the error
// says how far the boot got.
func TestStalledBoot(t *testing.T) {
	b := testBackend(t)
	// The same file is the relay on the host and the "agent" in the
	// guest, where it spins (the image's /bin/sh is busybox). The relay
	// runs as the sandbox's uid, which must reach it.
	spin := filepath.Join(openDir(t), "spin")
	script := "#!/bin/sh\n[ \"$1\" = relay ] && exec " + testenv.Guest(t) + " \"$@\"\nwhile :; do :; done\n"
	if err := os.WriteFile(spin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stalled := *b
	// A boot takes 8–11 s of CPU under TCG here, less under KVM.
	stalled.bootCPU = 25 * time.Second
	s := &backend.Spec{ID: "stalled", Hostname: "st", Dir: filepath.Join(t.TempDir(), "s"), GuestBinary: spin, Rootfs: busyboxRoot(t)}
	ctx := context.Background()
	defer stalled.Delete(ctx, s)
	start := time.Now()
	err := stalled.Run(ctx, s)
	t.Logf("after %v: %v", time.Since(start), err)
	if !errors.Is(err, errStalled) {
		t.Fatalf("a spinning guest: %v", err)
	}
	if !strings.Contains(err.Error(), "smolvm init: starting the agent") {
		t.Fatalf("the error does not say how far the boot got: %v", err)
	}
}

func TestCPUTime(t *testing.T) {
	before, ok := cpuTime(os.Getpid())
	if !ok {
		t.Fatal("no CPU time for this process")
	}
	// Spin until the CPU time moves (slowly on a loaded host).
	after := before
	for end := time.Now().Add(20 * time.Second); after-before < 50*time.Millisecond && time.Now().Before(end); {
		after, _ = cpuTime(os.Getpid())
	}
	if after-before < 50*time.Millisecond {
		t.Fatalf("CPU time went from %v to %v over 20 s of spinning", before, after)
	}
}

// TestForkCopyOnWrite: two copies restored from one checkpoint map its
// RAM file copy-on-write (share=off), held read-only, each as its own
// uid, which can read neither the other copy's disk or memory nor any
// RAM file. What one copy writes to memory (a guest tmpfs, which lives
// only in guest RAM) neither the other copy nor the source sees, only
// the writer holds those pages, the checkpoint's file never changes,
// and a copy outlives the checkpoint's files.
func TestForkCopyOnWrite(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	root := busyboxRoot(t)
	spec := func(name string) *backend.Spec { return busyboxSpec(t, root, name) }
	sh := func(s *backend.Spec, script string) string {
		t.Helper()
		var out, errb strings.Builder
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		exit, err := b.Exec(ectx, s, sandbox.Process{Args: []string{"sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
		if err != nil || exit.Code != 0 {
			t.Fatalf("%s: %q: %v %+v %s", s.ID, script, err, exit, errb.String())
		}
		return out.String()
	}
	src := spec("src")
	defer b.Delete(ctx, src)
	if err := b.Run(ctx, src); err != nil {
		t.Fatal(err)
	}
	sh(src, "echo A > /dev/shm/v; echo S > /root/s")
	dir := filepath.Join(t.TempDir(), "ck")
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	ram := filepath.Join(dir, snapRAM)
	sum := fileSum(t, ram)
	var copies []*backend.Spec
	// Under a dir any uid may search: only the copies' own dirs and
	// files keep one copy's uid from the other's.
	parent := openDir(t)
	for _, name := range []string{"c1", "c2"} {
		c := spec(name)
		c.Dir = filepath.Join(parent, name)
		defer b.Delete(ctx, c)
		start := time.Now()
		if err := b.Restore(ctx, c, dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restored in %v", name, time.Since(start))
		unprivileged(t, b, c)
		pid, _ := b.qemu(c)
		mapsReadOnly(t, pid, ram)
		copies = append(copies, c)
	}
	c1, c2 := copies[0], copies[1]
	// A copy's uid reads its own overlay, but not what another sandbox
	// holds: the other copy's overlay and memory (its QEMU's), the
	// source's RAM file, nor the checkpoint both copies map.
	uid1, _ := sandboxUID(b.cfg.Cache, c1.Dir)
	if out, err := readAs(uid1, filepath.Join(c1.Dir, "disk.qcow2")); err != nil {
		t.Fatalf("c1's uid cannot read its own overlay: %v, %s", err, out)
	}
	pid2, _ := b.qemu(c2)
	for _, p := range []string{filepath.Join(c2.Dir, "disk.qcow2"), fmt.Sprintf("/proc/%d/mem", pid2), filepath.Join(src.Dir, "ram"), ram} {
		if out, err := readAs(uid1, p); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("c1's uid reading %s: %v, %q; want permission denied", p, err, out)
		}
	}
	before, err := b.Stats(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	sh(c1, "echo B > /dev/shm/v; dd if=/dev/urandom of=/dev/shm/big bs=1M count=32 2>/dev/null")
	for _, tc := range []struct {
		s    *backend.Spec
		want string
	}{{c1, "B\n"}, {c2, "A\n"}, {src, "A\n"}} {
		if got := sh(tc.s, "cat /dev/shm/v"); got != tc.want {
			t.Errorf("%s reads %q, want %q", tc.s.ID, got, tc.want)
		}
	}
	s1, err := b.Stats(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Stats(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("private memory: c1 %d MiB after writing 32 MiB, c2 %d MiB (was %d); mapped: c1 %d MiB, c2 %d MiB",
		s1.ResidentBytes>>20, s2.ResidentBytes>>20, before.ResidentBytes>>20, s1.MemoryBytes>>20, s2.MemoryBytes>>20)
	if s1.ResidentBytes-s2.ResidentBytes < 24<<20 {
		t.Errorf("the writer holds %d MiB of its own, the other copy %d MiB: the 32 MiB written are not private to the writer", s1.ResidentBytes>>20, s2.ResidentBytes>>20)
	}
	if fileSum(t, ram) != sum {
		t.Fatal("the checkpoint's RAM file changed")
	}
	// A fork's checkpoint is scratch, gone once its copies run.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if got := sh(c2, "cat /dev/shm/v"); got != "A\n" {
		t.Fatalf("c2 after its checkpoint went: %q", got)
	}
	// The copy's disk outlives that checkpoint too: a checkpoint of the
	// copy, restored after the copy is gone, has both layers' files.
	sh(c2, "echo D > /root/d; sync")
	dir2 := filepath.Join(t.TempDir(), "ck2")
	// Left running: a QEMU that dropped root takes its disk chain back
	// after the migration without reopening any file.
	if err := b.Checkpoint(ctx, c2, dir2, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	if got := sh(c2, "echo E > /root/e; cat /root/d /root/e"); got != "D\nE\n" {
		t.Fatalf("c2 after its checkpoint: %q", got)
	}
	if err := b.Delete(ctx, c2); err != nil {
		t.Fatal(err)
	}
	c3 := spec("c3")
	defer b.Delete(ctx, c3)
	if err := b.Restore(ctx, c3, dir2); err != nil {
		t.Fatal(err)
	}
	if got := sh(c3, "cat /root/s /root/d /dev/shm/v"); got != "S\nD\nA\n" {
		t.Fatalf("a copy of a copy reads %q", got)
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestIdleWatch: a guest is idle only once init has started the agent
// and QEMU then uses under idleCPU for idleWall; a starved or busy guest
// is not.
func TestIdleWatch(t *testing.T) {
	t0 := time.Unix(0, 0)
	var w idleWatch
	for i := range 120 { // two minutes of boot, no CPU, agent not started
		if w.idle(t0.Add(time.Duration(i)*time.Second), 0, false) {
			t.Fatalf("idle at %ds before the agent started", i)
		}
	}
	t1 := t0.Add(2 * time.Minute)
	cpu := 10 * time.Second
	for i := 0; i < 59; i++ {
		if w.idle(t1.Add(time.Duration(i)*time.Second), cpu+time.Duration(i)*10*time.Millisecond, true) {
			t.Fatalf("idle after %ds", i)
		}
	}
	if !w.idle(t1.Add(idleWall), cpu+600*time.Millisecond, true) {
		t.Error("not idle after idleWall with 0.6 s of CPU")
	}

	// Busy (or starved, using a little at a time): the window restarts.
	w = idleWatch{}
	for i := range 300 {
		if w.idle(t0.Add(time.Duration(i)*time.Second), time.Duration(i)*50*time.Millisecond, true) {
			t.Fatalf("a guest using 5%% of a core called idle at %ds", i)
		}
	}
}

// TestStandby: a restore into a created sandbox loads the checkpoint into
// the QEMU that Create pre-launched (the same process serves the copy),
// and a restore into one whose pre-launched QEMU died while it waited
// fails with ErrStandbyDied, leaving nothing running. Every QEMU and
// relay, booted or pre-launched, runs as its sandbox's uid, and the copy
// holds the checkpoint's RAM file read-only.
func TestStandby(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	root := busyboxRoot(t)
	spec := func(name string) *backend.Spec { return busyboxSpec(t, root, name) }
	src := spec("src")
	defer b.Delete(ctx, src)
	if err := b.Run(ctx, src); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, src, sandbox.Process{Args: []string{"sh", "-c", "echo kept > /dev/shm/m"}}, sandbox.Stdio{}); err != nil {
		t.Fatal(err)
	}
	unprivileged(t, b, src)
	for _, name := range []string{"qmp.sock", "serial.sock", "agent.sock", "ram", "console.log"} {
		fi, err := os.Stat(filepath.Join(src.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s is %v, owned by %d: want root's, 0600", name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}

	target := spec("target")
	defer b.Delete(ctx, target)
	if err := b.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	pid, ok := b.qemu(target)
	if !ok {
		t.Fatal("Create pre-launched no QEMU")
	}
	if st, _ := b.State(ctx, target); st != backend.StatusCreated {
		t.Fatalf("a created sandbox with its QEMU waiting reads %s", st)
	}
	// Dropped at its start, before the restore hands it anything.
	unprivileged(t, b, target)
	start := time.Now()
	if err := b.Restore(ctx, target, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored into the pre-launched QEMU in %v (load %s)", time.Since(start), loadAvg())
	if now, _ := b.qemu(target); now != pid {
		t.Fatalf("the copy runs in QEMU %d, not in the pre-launched %d", now, pid)
	}
	unprivileged(t, b, target)
	mapsReadOnly(t, pid, filepath.Join(dir, snapRAM))
	if fi, err := os.Stat(filepath.Join(dir, snapRAM)); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the checkpoint's RAM file is %v, want 0600", fi.Mode())
	}
	var out strings.Builder
	if _, err := b.Exec(ctx, target, sandbox.Process{Args: []string{"cat", "/dev/shm/m"}}, sandbox.Stdio{Stdout: &out}); err != nil || out.String() != "kept\n" {
		t.Fatalf("the copy reads %q, %v", out.String(), err)
	}

	dead := spec("dead")
	defer b.Delete(ctx, dead)
	if err := b.Create(ctx, dead); err != nil {
		t.Fatal(err)
	}
	pid, _ = b.qemu(dead)
	killQEMU(t, b, dead, pid)
	err := b.Restore(ctx, dead, dir)
	if !errors.Is(err, ErrStandbyDied) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("restore into a sandbox whose pre-launched QEMU died: %v", err)
	}
	t.Logf("restore into a dead standby: %v", err)
	if _, ok := b.relay(dead); ok {
		t.Error("the dead standby's relay still runs")
	}
	if st, _ := b.State(ctx, dead); st != backend.StatusCreated {
		t.Errorf("after its dead QEMU was cleaned up, the sandbox reads %s", st)
	}
}

// unprivileged fails t unless s's QEMU and relay run as s's own uid.
func unprivileged(t *testing.T, b *Backend, s *backend.Spec) {
	t.Helper()
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil || uid < uidBase || uid >= uidBase+uidCount {
		t.Fatalf("%s's uid: %d, %v", s.ID, uid, err)
	}
	qemu, qok := b.qemu(s)
	relay, rok := b.relay(s)
	if !qok || !rok {
		t.Fatalf("%s: QEMU running %t, relay running %t", s.ID, qok, rok)
	}
	runsAs(t, s.ID+"'s QEMU", qemu, uid)
	runsAs(t, s.ID+"'s relay", relay, uid)
}

// runsAs fails t unless process pid's uids and gids (real, effective,
// saved, file system) are all id.
func runsAs(t *testing.T, what string, pid, id int) {
	t.Helper()
	p, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(string(p), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || (f[0] != "Uid:" && f[0] != "Gid:") {
			continue
		}
		seen++
		for _, v := range f[1:] {
			if v != strconv.Itoa(id) {
				t.Errorf("%s (pid %d) runs with %q, want %d throughout", what, pid, line, id)
				break
			}
		}
	}
	if seen != 2 {
		t.Fatalf("no Uid and Gid lines in /proc/%d/status", pid)
	}
}

// mapsReadOnly fails t unless QEMU pid maps ram privately (copy-on-write)
// through a file it holds read-only: it cannot write what other copies
// map.
func mapsReadOnly(t *testing.T, pid int, ram string) {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mapped := false
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[5] == ram {
			mapped = true
			if f[1] != "rw-p" {
				t.Errorf("QEMU %d maps %s %s, want rw-p (private)", pid, ram, f[1])
			}
		}
	}
	if !mapped {
		t.Errorf("QEMU %d does not map %s", pid, ram)
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, e := range fds {
		if link, _ := os.Readlink(filepath.Join(dir, e.Name())); link != ram {
			continue
		}
		held++
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				if fl, _ := strconv.ParseInt(strings.TrimSpace(v), 8, 64); fl&syscall.O_ACCMODE != syscall.O_RDONLY {
					t.Errorf("QEMU %d holds %s with flags %s: not read-only", pid, ram, strings.TrimSpace(v))
				}
			}
		}
	}
	if held == 0 {
		t.Errorf("QEMU %d holds no file of %s", pid, ram)
	}
}

// readAs reads the first byte of path as uid (its own group, no other),
// and returns what head said.
func readAs(uid int, path string) (string, error) {
	cmd := exec.Command("/bin/busybox", "head", "-c", "1", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// openDir is a temporary dir any uid may search (a t.TempDir is 0700).
func openDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "smolvm-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSandboxUID: each sandbox gets a uid of its own, kept until it is
// deleted; the uid of a sandbox whose directory vanished goes to the
// next one hashed onto it.
func TestSandboxUID(t *testing.T) {
	cache, root := t.TempDir(), t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b")}
	uids := map[int]string{}
	for _, d := range dirs {
		os.Mkdir(d, 0o700)
		uid, err := sandboxUID(cache, d)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := sandboxUID(cache, d); again != uid {
			t.Fatalf("%s: uid %d, then %d", d, uid, again)
		}
		if other, ok := uids[uid]; ok {
			t.Fatalf("%s and %s share uid %d", d, other, uid)
		}
		uids[uid] = d
	}
	// Another sandbox hashed onto a's uid, while a lives and once a's
	// directory is gone.
	a, _ := sandboxUID(cache, dirs[0])
	held := filepath.Join(cache, "uids", strconv.Itoa(a))
	if ok, err := holdUID(held, filepath.Join(root, "c")); ok || err != nil {
		t.Fatalf("a live sandbox's uid was taken: %t, %v", ok, err)
	}
	os.RemoveAll(dirs[0])
	if ok, err := holdUID(held, filepath.Join(root, "c")); !ok || err != nil {
		t.Fatalf("a gone sandbox's uid was not given back: %t, %v", ok, err)
	}
	b, _ := sandboxUID(cache, dirs[1])
	releaseUID(cache, dirs[1])
	if _, err := os.Stat(filepath.Join(cache, "uids", strconv.Itoa(b))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a deleted sandbox still holds uid %d", b)
	}
}

// TestOverlay: the overlays written without qemu-img are what qemu-img
// reads as such (backing name and format, size), with consistent
// refcounts, over a raw base and over a qcow2 one named relatively; and
// backingName reads back the name each holds.
func TestOverlay(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-utils not installed")
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "blank.raw")
	if err := os.WriteFile(raw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(raw, 3<<30+4096); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, base, format string }{
		{filepath.Join(dir, "base-1.qcow2"), raw, "raw"},
		{filepath.Join(dir, "disk.qcow2"), "base-1.qcow2", "qcow2"},
	} {
		if err := overlay(tc.path, tc.base, tc.format); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("qemu-img", "check", tc.path).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img check %s: %v: %s", tc.path, err, out)
		}
		out, err := exec.Command("qemu-img", "info", "--output=json", tc.path).Output()
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Format             string `json:"format"`
			VirtualSize        int64  `json:"virtual-size"`
			BackingFilename    string `json:"backing-filename"`
			BackingFilenameFmt string `json:"backing-filename-format"`
		}
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatal(err)
		}
		if info.Format != "qcow2" || info.VirtualSize != 3<<30+4096 || info.BackingFilename != tc.base || info.BackingFilenameFmt != tc.format {
			t.Fatalf("%s reads as %+v", tc.path, info)
		}
		// What a restore hands QEMU the chain by (diskNode).
		if name, err := backingName(tc.path); name != tc.base || err != nil {
			t.Fatalf("backingName(%s) = %q, %v", tc.path, name, err)
		}
	}
	if err := overlay(filepath.Join(dir, "x.qcow2"), "missing.qcow2", "qcow2"); err == nil {
		t.Fatal("an overlay of a missing base was made")
	}
}

// killQEMU kills s's QEMU from outside and waits for s to read as stopped.
func killQEMU(t *testing.T, b *Backend, s *backend.Spec, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := b.State(context.Background(), s); st == backend.StatusStopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still reads as running or created after its QEMU was killed", s.ID)
		}
	}
}

// TestMissingTools: a host without mkfs.ext4 or xz hears which packages
// to install when the backend opens, not from a create halfway through.
func TestMissingTools(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86 not installed")
	}
	bin := t.TempDir()
	if err := os.Symlink(qemu, filepath.Join(bin, "qemu-system-x86_64")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	_, err = New(Config{Cache: t.TempDir(), Busybox: "/no/busybox"})
	for _, want := range []string{"mkfs.ext4 (e2fsprogs)", "xz (xz-utils)", "/no/busybox (busybox-static)", "apt-get install " + Packages} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the backend without its tools: %v; want it to name %q", err, want)
		}
	}
}

// TestHostImageRefused: the builtin host image is refused before its
// files are read: its mount here does not exist, and sizing it would fail
// otherwise.
func TestHostImageRefused(t *testing.T) {
	b := &Backend{cfg: Config{Cache: t.TempDir()}}
	root := busyboxRoot(t)
	root.Host = true
	root.Mounts = []backend.Mount{{Source: "/no/such/usr", Destination: "/usr"}}
	_, err := b.create(&backend.Spec{ID: "host", Dir: filepath.Join(t.TempDir(), "s"), Rootfs: root})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "smolvm image build base") {
		t.Fatalf("create of the host image: %v; want it refused as unsupported, naming the base image", err)
	}
}

// TestTerminatedQEMU: a QEMU ended by SIGTERM (a pre-launched one: no
// boot needed) reports 143 and the signal, not a kill's 137.
func TestTerminatedQEMU(t *testing.T) {
	b := testBackend(t)
	s := &backend.Spec{ID: "term", Hostname: "t", Dir: filepath.Join(t.TempDir(), "s"), GuestBinary: testenv.Guest(t), Rootfs: busyboxRoot(t)}
	ctx := context.Background()
	defer b.Delete(ctx, s)
	if err := b.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	pid, ok := b.qemu(s)
	if !ok {
		t.Fatal("no QEMU after create")
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := b.State(ctx, s); st == backend.StatusStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("QEMU still runs 10 s after SIGTERM")
		}
	}
	e, err := b.MainExit(ctx, s)
	if err != nil || e == nil || e.Code != 143 || e.Signal != 15 || !strings.Contains(e.Reason, "SIGTERM") {
		t.Fatalf("main exit of a VM ended by SIGTERM: %+v, %v; want 143, signal 15", e, err)
	}
}
