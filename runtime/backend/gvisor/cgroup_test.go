package gvisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

func newBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Config{Runsc: testenv.Runsc(t)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hog is a spec whose main process holds memory: a killed Sentry with
// memory to tear down stays in its cgroups the longest.
func hog(t *testing.T, root backend.Rootfs) *backend.Spec {
	id := make([]byte, 6)
	rand.Read(id)
	s := &backend.Spec{
		ID: "cg-" + hex.EncodeToString(id), Hostname: "sb", Rootfs: root,
		Main:        &sandbox.Process{Args: []string{"python3", "-c", "import time; b = b'x' * (64 << 20); time.sleep(600)"}},
		Env:         []string{"PATH=/usr/bin:/bin"},
		GuestBinary: testenv.Guest(t),
		MachineID:   hex.EncodeToString(append(id, make([]byte, 10)...)),
	}
	s.Dir = filepath.Join(t.TempDir(), s.ID)
	return s
}

// cgroupDirs lists sandbox id's cgroup directories in every hierarchy.
func cgroupDirs(id string) []string {
	var dirs []string
	for _, parent := range cgroupParents() {
		if _, err := os.Stat(filepath.Join(parent, id)); err == nil {
			dirs = append(dirs, filepath.Join(parent, id))
		}
	}
	return dirs
}

// TestCgroupChurn creates and force-deletes 40 sandboxes, four at a time:
// half of them holding memory, half cut short mid-create (a crash, a
// client gone), as a hostile run's 643 removes did. 5 of those left 9
// empty cgroup directories each when Delete tried rmdir once, right after
// its SIGKILLs; so did 10 of these 20 cut-short creates. Every delete must
// leave none of its sandbox's cgroups. The cgroup parents are shared with
// every other smolvm on the host, so what must not grow is this test's
// own sandboxes' directories; the host's totals are logged.
func TestCgroupChurn(t *testing.T) {
	b := newBackend(t)
	root := hostRoot(t)
	ctx := context.Background()
	const workers, cycles = 4, 10
	before := len(cgroupIDs())
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range cycles {
				s := hog(t, root)
				ids[w] = append(ids[w], s.ID)
				if i%2 == 1 {
					// A create cut short, as by a crash or a client gone.
					cut, cancel := context.WithTimeout(ctx, time.Duration(100+37*i*(w+1)%400)*time.Millisecond)
					b.Run(cut, s)
					cancel()
				} else if err := b.Run(ctx, s); err != nil {
					t.Errorf("worker %d cycle %d: %v", w, i, err)
					return
				} else if err := waitMemory(b, s, 64<<20); err != nil {
					t.Error(err)
				}
				if err := b.Delete(ctx, s); err != nil {
					t.Errorf("worker %d cycle %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	var left []string
	for _, id := range slices.Concat(ids...) {
		left = append(left, cgroupDirs(id)...)
	}
	t.Logf("%d create/delete cycles (%d at a time): %d sandbox cgroups on the host before, %d after; %d directories of this test's sandboxes left",
		workers*cycles, workers, before, len(cgroupIDs()), len(left))
	if len(left) > 0 {
		t.Errorf("cgroup directories left by deleted sandboxes: %v", left)
	}
}

// waitMemory waits until s's cgroup holds n bytes.
func waitMemory(b *Backend, s *backend.Spec, n int64) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := b.Stats(context.Background(), s)
		if err != nil {
			return err
		}
		if st.MemoryBytes >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s holds %d bytes after 30 s, want %d", s.ID, st.MemoryBytes, n)
		}
	}
}

// TestSweep: Sweep removes an empty leftover cgroup (with a child cgroup
// in it), and spares one gone does not name (another data dir's), and,
// though gone names them, a running sandbox's and one a live process
// names (a create under way).
func TestSweep(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	live := hog(t, hostRoot(t))
	live.Main = nil
	if err := b.Run(ctx, live); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(ctx, live) })
	leftover, named, kept := plant(t, "leftover"), plant(t, "named"), plant(t, "kept")
	// A process naming the ID in its command line, as runsc create does.
	// (sh stays, with its $0, for a list of two commands.)
	sleeper := exec.Command("sh", "-c", "sleep 60; :", "/data/sandboxes/"+named+"/runsc")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })

	// Only this test's: the host's other cgroups are other tests'.
	mine := []string{live.ID, leftover, named}
	removed, err := b.Sweep(ctx, func(id string) bool { return slices.Contains(mine, id) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, "leftover cgroup "+leftover) {
		t.Errorf("swept %v, want the leftover %s among them", removed, leftover)
	}
	if dirs := cgroupDirs(leftover); len(dirs) > 0 {
		t.Errorf("the leftover's cgroups stay: %v", dirs)
	}
	for _, id := range []string{live.ID, named, kept} {
		if len(cgroupDirs(id)) == 0 || slices.Contains(removed, "leftover cgroup "+id) {
			t.Errorf("swept %s's cgroups (removed %v)", id, removed)
		}
	}
	if st, err := b.State(ctx, live); err != nil || st != backend.StatusRunning {
		t.Errorf("the live sandbox after the sweep: %s, %v", st, err)
	}
}

// plant makes an empty cgroup, with a child, in every hierarchy for a new
// ID, as a delete cut short leaves it; the test removes what remains.
func plant(t *testing.T, what string) string {
	t.Helper()
	id := make([]byte, 6)
	rand.Read(id)
	name := what + "-" + hex.EncodeToString(id)
	for _, parent := range cgroupParents() {
		if _, err := os.Stat(parent); err != nil {
			continue // a hierarchy no sandbox has used yet
		}
		if err := os.MkdirAll(filepath.Join(parent, name, "child"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if len(cgroupDirs(name)) == 0 {
		t.Fatalf("planted no cgroup for %s under %v", name, cgroupParents())
	}
	t.Cleanup(func() { removeCgroupsOnce(name) })
	return name
}

// TestRemoveCgroupsWaits: removeCgroups waits for tasks to leave a cgroup
// (rmdir is EBUSY until then), for a bounded time.
func TestRemoveCgroupsWaits(t *testing.T) {
	testenv.NeedRoot(t) // it makes cgroups
	name := plant(t, "busy")
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	kill := func() {
		sleeper.Process.Kill()
		<-exited
	}
	go func() { sleeper.Wait(); close(exited) }()
	t.Cleanup(kill)
	joined := false
	for _, dir := range cgroupDirs(name) {
		// cpuset refuses tasks until given CPUs: any other will do.
		joined = joined || os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0) == nil
	}
	if !joined {
		t.Fatal("no cgroup took the task")
	}
	start := time.Now()
	err := removeCgroups(context.Background(), name)
	if took := time.Since(start); err == nil || took < cgroupDrain || took > cgroupDrain+2*time.Second {
		t.Fatalf("a cgroup with a task that stays: %v after %s, want EBUSY after %s", err, took, cgroupDrain)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		kill()
	}()
	if err := removeCgroups(context.Background(), name); err != nil {
		t.Fatalf("a cgroup whose task is killed meanwhile: %v", err)
	}
	if dirs := cgroupDirs(name); len(dirs) > 0 {
		t.Fatalf("left %v", dirs)
	}
}
