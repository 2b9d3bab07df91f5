package manager

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// cgroupParents are where the gVisor backend makes a sandbox's cgroups
// on this host: /smolvm/ID in each hierarchy (v1), or in the unified one.
func cgroupParents() []string {
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/smolvm")
	v2, _ := filepath.Glob("/sys/fs/cgroup/smolvm")
	return append(v1, v2...)
}

// cgroupsOf lists sandbox id's cgroup directories.
func cgroupsOf(id string) []string {
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/smolvm/" + id)
	v2, _ := filepath.Glob("/sys/fs/cgroup/smolvm/" + id)
	return append(v1, v2...)
}

// plantCgroups makes empty cgroups for id in every hierarchy, as a delete
// cut short left them; the test removes what remains.
func plantCgroups(t *testing.T, id string) {
	t.Helper()
	for _, p := range cgroupParents() {
		if err := os.Mkdir(filepath.Join(p, id), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(filepath.Join(p, id)) })
	}
	if len(cgroupsOf(id)) == 0 {
		t.Fatal("no cgroup hierarchy has a smolvm parent")
	}
}

// TestGCSweepsCgroups: GC, and Recover (serve's start), remove the
// cgroups a delete left of a removed sandbox (a tombstone, no record) and
// those of a stopped one, and leave a running sandbox's and those of a
// sandbox this data dir never had (another data dir's) alone.
func TestGCSweepsCgroups(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	live, stopped, removed := m.run(t, sandbox.Config{}), m.run(t, sandbox.Config{}), m.run(t, sandbox.Config{})
	if _, err := m.Stop(ctx, stopped.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if len(cgroupsOf(stopped.ID)) == 0 {
		t.Fatal("a stopped sandbox's cgroups are gone before any gc: nothing to show")
	}
	if err := m.Remove(ctx, removed.ID, true); err != nil {
		t.Fatal(err)
	}
	plantCgroups(t, removed.ID)
	foreign := newID()
	plantCgroups(t, foreign)

	swept, err := m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{removed.ID, stopped.ID} {
		if !slices.Contains(swept, "leftover cgroup "+id) || len(cgroupsOf(id)) > 0 {
			t.Errorf("gc removed %q; %s's cgroups left: %v", swept, id, cgroupsOf(id))
		}
	}
	checkSpared := func(after string) {
		t.Helper()
		for _, id := range []string{live.ID, foreign} {
			if len(cgroupsOf(id)) == 0 {
				t.Errorf("%s removed %s's cgroups", after, id)
			}
		}
		if out, _, _ := m.sh(t, live, "echo ok"); out != "ok\n" {
			t.Errorf("the running sandbox after %s: %q", after, out)
		}
	}
	checkSpared("gc")

	plantCgroups(t, removed.ID)
	if _, swept, err = m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(swept, "leftover cgroup "+removed.ID) || len(cgroupsOf(removed.ID)) > 0 {
		t.Errorf("recovery removed %q; the removed sandbox's cgroups left: %v", swept, cgroupsOf(removed.ID))
	}
	checkSpared("recovery")
}
