package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// snapshotCommit stores a snapshot of one file in dataDir, as a checkpoint
// would.
func snapshotCommit(t *testing.T, dataDir, name, content string, lin sandbox.Lineage) *sandbox.Snapshot {
	t.Helper()
	st, err := store.Open(t.Context(), dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := snapshot.Open(t.Context(), dataDir, st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait() // the seal, before the database closes
	g, err := s.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Abort()
	if err := os.WriteFile(filepath.Join(g.Dir(), "pages.img"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := g.Commit(t.Context(), name, "sha256:0123456789abcdef", lin, map[string]string{"cmd": "sh"})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestSnapshotLsInspect(t *testing.T) {
	dataDir := t.TempDir()
	c := newCLI(t, dataDir)
	base := snapshotCommit(t, dataDir, "base", "base pages", sandbox.Lineage{Sandbox: "aaaa1111", SandboxName: "dev"})
	child := snapshotCommit(t, dataDir, "", "child pages", sandbox.Lineage{Sandbox: "bbbb2222", Parent: base.ID})

	out, errOut, code := c.run("snapshot", "ls", "--json")
	if code != 0 {
		t.Fatalf("ls --json: exit %d: %s", code, errOut)
	}
	var listed []sandbox.Snapshot
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("ls --json output %q: %v", out, err)
	}
	if len(listed) != 2 || listed[0].ID != child.ID || listed[1].ID != base.ID || listed[0].Lineage.Parent != base.ID {
		t.Errorf("ls --json = %+v", listed)
	}

	out, errOut, code = c.run("snapshot", "ls")
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID SOURCE PARENT IMAGE SIZE AGE" {
		t.Fatalf("ls:\n%s", out)
	}
	short := func(id string) string { return strings.TrimPrefix(id, "sha256:")[:12] }
	wantRows := [][]string{
		{"-", short(child.ID), "bbbb2222", short(base.ID), "0123456789ab"},
		{"base", short(base.ID), "dev", "-", "0123456789ab"},
	}
	for i, want := range wantRows {
		got := strings.Fields(lines[i+1])
		if len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("ls row %d = %q, want it to start with %q", i+1, lines[i+1], want)
		}
	}

	for _, q := range []string{"base", short(base.ID)} {
		out, errOut, code = c.run("snapshot", "inspect", q)
		if code != 0 {
			t.Fatalf("inspect %s: exit %d: %s", q, code, errOut)
		}
		var got sandbox.Snapshot
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("inspect output %q: %v", out, err)
		}
		var meta map[string]string
		if err := json.Unmarshal(got.Meta, &meta); err != nil || meta["cmd"] != "sh" {
			t.Errorf("inspect %s meta %s: %v", q, got.Meta, err)
		}
		if got.ID != base.ID || got.Name != "base" || len(got.Files) != 1 || got.Files[0].Name != "pages.img" ||
			!got.Durable || !strings.HasPrefix(got.Digest, "sha256:") || got.Files[0].SHA256 == "" {
			t.Errorf("inspect %s = %+v", q, got)
		}
	}
	if _, errOut, code = c.run("snapshot", "inspect", "nope"); code != exitFailure || errOut != "smolvm: snapshot not found: nope\n" {
		t.Errorf("inspect of a missing snapshot: exit %d, %q", code, errOut)
	}
}

func TestSnapshotRm(t *testing.T) {
	dataDir := t.TempDir()
	c := newCLI(t, dataDir)
	snap := snapshotCommit(t, dataDir, "gone", "pages", sandbox.Lineage{})
	out, errOut, code := c.run("snapshot", "rm", "missing")
	if code != exitFailure || out != "" || errOut != "smolvm: snapshot not found: missing\n" {
		t.Errorf("rm missing: exit %d, stdout %q, stderr %q; want 125 and one line", code, out, errOut)
	}

	out, errOut, code = c.run("snapshot", "rm", "gone", "missing")
	if code != exitFailure || out != "Removed gone\n" || errOut != "smolvm: snapshot not found: missing\n" {
		t.Errorf("rm gone missing: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "snapshots", strings.TrimPrefix(snap.ID, "sha256:"))); !os.IsNotExist(err) {
		t.Errorf("snapshot dir after rm: %v", err)
	}
	out, _, code = c.run("snapshot", "ls", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("ls --json after rm: exit %d, %q", code, out)
	}
}

// TestCrashWhileSealing: a real `smolvm checkpoint` exits as soon as its
// snapshot can be restored, and hands the hashing and syncfs to a detached
// `smolvm snapshot seal`, which is killed here with SIGKILL while it
// hashes 120 MB. The snapshot is lost, and only it: it is never listed, an
// older snapshot still restores, the source runs on, and gc removes what
// the lost one left.
func TestCrashWhileSealing(t *testing.T) {
	c := newSandboxCLI(t)
	c.self = testenv.Smolvm(t) // the detached sealer
	c.must("run", "-d", "--name", "src", "--memory", "1g")
	// 120 MB of memory that does not compress away: sealing hashes it all.
	c.must("exec", "src", "--", "sh", "-c", "head -c 120000000 /dev/urandom > /tmp/fill")
	c.must("checkpoint", "--name", "old", "src")
	c.sealed("old")

	id := strings.TrimSpace(c.must("checkpoint", "--name", "new", "src"))
	if len(id) != 64 {
		t.Fatalf("checkpoint printed %q", id)
	}
	pid := sealer(t, id)
	if pid == 0 {
		t.Fatal("no smolvm snapshot seal runs once checkpoint exited: the seal was not handed over")
	}
	st, err := store.Open(t.Context(), c.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var staging string
	if err := st.DB().QueryRowContext(t.Context(), `SELECT sealer FROM snapshots WHERE id = ?`, id).Scan(&staging); err != nil || staging == "" {
		t.Fatalf("the row names no sealer: %q, %v", staging, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A killed Go process's leader is a zombie while its other threads,
	// which share its descriptors, still exit: wait for the lock itself.
	for lock := filepath.Join(c.dataDir, "snapshots", staging, "pid"); flock.Held(lock); time.Sleep(10 * time.Millisecond) {
	}
	var durable bool
	if err := st.DB().QueryRowContext(t.Context(), `SELECT durable FROM snapshots WHERE id = ?`, id).Scan(&durable); err != nil || durable {
		t.Fatalf("the killed seal's row: durable %v, %v; the kill missed the sealing window", durable, err)
	}

	var listed []sandbox.Snapshot
	if err := json.Unmarshal([]byte(c.must("snapshot", "ls", "--json")), &listed); err != nil || len(listed) != 1 || listed[0].Name != "old" || !listed[0].Durable {
		t.Fatalf("snapshots after the crash: %+v, %v; want only the older one, durable", listed, err)
	}
	if _, errOut, code := c.run("snapshot", "inspect", "new"); code != exitFailure || !strings.Contains(errOut, "not found") {
		t.Errorf("inspect of the lost snapshot: exit %d, %q", code, errOut)
	}
	if _, errOut, code := c.run("restore", id); code != exitFailure || !strings.Contains(errOut, "before it was durable") {
		t.Errorf("restore of the lost snapshot: exit %d, %q", code, errOut)
	}
	c.must("exec", "src", "--", "true")
	c.must("restore", "--name", "back", "old")
	if got := c.must("exec", "back", "--", "sh", "-c", "wc -c < /tmp/fill"); strings.TrimSpace(got) != "120000000" {
		t.Errorf("restored from the older snapshot: %q", got)
	}
	c.must("gc")
	if _, err := os.Stat(filepath.Join(c.dataDir, "snapshots", id)); !os.IsNotExist(err) {
		t.Errorf("the lost snapshot's files after gc: %v", err)
	}
}

// TestCLIHotPool: pool create --from SNAPSHOT --hot N, a restore that
// claims a hot copy, and a snapshot rm that names the pool holding it.
func TestCLIHotPool(t *testing.T) {
	c := newSandboxCLI(t)
	t.Cleanup(func() { c.run("pool", "rm", "hp") })
	c.must("run", "-d", "--name", "src")
	c.must("exec", "src", "--", "sh", "-c", "echo kept > /root/f")
	c.must("checkpoint", "--name", "s", "src")
	if _, errOut, code := c.run("pool", "create", "--name", "bad", "--hot", "1"); code != exitFailure || !strings.Contains(errOut, "--from") {
		t.Errorf("--hot without --from: exit %d, %q", code, errOut)
	}
	c.must("pool", "create", "--name", "hp", "--from", "s", "--hot", "1", "--wait")
	var pools []sandbox.Pool
	if err := json.Unmarshal([]byte(c.must("pool", "ls", "--json")), &pools); err != nil || len(pools) != 1 || pools[0].HotReady != 1 || pools[0].Hot != 1 {
		t.Fatalf("pool ls --json: %+v, %v", pools, err)
	}
	if out := c.must("pool", "ls"); !regexp.MustCompile(`(?m)^hp\s+\S+\s+1/1 hot\s`).MatchString(out) {
		t.Errorf("pool ls shows a hot pool's copies as:\n%s", out)
	}
	c.must("restore", "--name", "c", "s")
	if out := c.must("exec", "c", "--", "sh", "-c", "cat /root/f; hostname"); out != "kept\nc\n" {
		t.Errorf("claimed copy: %q", out)
	}
	pools = nil // hot_ready 0 is left out of the JSON
	if err := json.Unmarshal([]byte(c.must("pool", "ls", "--json")), &pools); err != nil || len(pools) != 1 || pools[0].HotReady != 0 {
		t.Errorf("after the claim: %+v, %v", pools, err)
	}
	if _, errOut, code := c.run("snapshot", "rm", "s"); code != exitFailure || !strings.Contains(errOut, "hot pool hp") {
		t.Errorf("snapshot rm under a hot pool: exit %d, %q", code, errOut)
	}
}

// sealer is the pid of the smolvm snapshot seal that seals snapshot id;
// 0 if none runs (a zombie leader does not count).
func sealer(t *testing.T, id string) int {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00snapshot\x00seal\x00"+id+"\x00")) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
			return pid
		}
	}
	return 0
}

// sealed waits until snapshot ref is durable, and returns it.
func (c *testCLI) sealed(ref string) sandbox.Snapshot {
	c.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var snap sandbox.Snapshot
		if err := json.Unmarshal([]byte(c.must("snapshot", "inspect", ref)), &snap); err != nil {
			c.t.Fatal(err)
		}
		if snap.Durable {
			return snap
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("snapshot %s is not durable after a minute: %+v", ref, snap)
		}
	}
}
