package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/sandbox"
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
		if got.ID != base.ID || got.Name != "base" || len(got.Files) != 1 || got.Files[0].Name != "pages.img" {
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
