package workspace

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/trust"
)

func openLedger(t *testing.T) *trust.Ledger {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := trust.OpenLedger(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeFiles creates files under dir; a value starting with "-> " makes a
// symlink.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// copyTree copies dir with cp -a, as the sandbox would hold it.
func copyTree(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func byPath(r Report) map[string]Change {
	m := map[string]Change{}
	for _, c := range r.Changes {
		m[c.Path] = c
	}
	return m
}

const testsOnly = `default = "deny"
[tests]
allow = ["**"]
`

// TestApplyPolicy: test-file changes land, others are denied and left as
// they were; the report and the audit log say so.
func TestApplyPolicy(t *testing.T) {
	ctx := context.Background()
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{
		".smolvm/policy.toml": testsOnly,
		"src/lib.go":          "package lib\n",
		"src/lib_test.go":     "package lib // old\n",
		"src/old.go":          "package lib // old\n",
		"src/old_test.go":     "package lib // gone\n",
		".git/HEAD":           "ref: refs/heads/main\n",
	})
	src := copyTree(t, tree)
	writeFiles(t, src, map[string]string{
		"src/lib.go":            "package lib // hacked\n",
		"src/lib_test.go":       "package lib // new test\n",
		"src/new/more_test.go":  "package new\n",
		".smolvm/policy.toml":   `default = "allow"`,
		".git/HEAD":             "ref: refs/heads/evil\n",
		".git/hooks/pre-commit": "#!/bin/sh\nrm -rf ~\n",
	})
	os.Remove(filepath.Join(src, "src/old.go"))
	os.Remove(filepath.Join(src, "src/old_test.go"))

	l := openLedger(t)
	r, err := applyDir(ctx, src, Options{Tree: tree, Ledger: l, Requester: "test"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		kind    Kind
		outcome Outcome
	}{
		".smolvm/policy.toml":  {Modified, Denied},
		"src/lib.go":           {Modified, Denied},
		"src/lib_test.go":      {Modified, Applied},
		"src/new/more_test.go": {Added, Applied},
		"src/old.go":           {Deleted, Denied},
		"src/old_test.go":      {Deleted, Applied},
	}
	got := byPath(r)
	if len(got) != len(want) {
		t.Fatalf("changes: %+v", r.Changes)
	}
	for p, w := range want {
		c := got[p]
		if c.Kind != w.kind || c.Outcome != w.outcome {
			t.Errorf("%s: %s %s, want %s %s (%s)", p, c.Kind, c.Outcome, w.kind, w.outcome, c.Reason)
		}
	}
	if c := got["src/lib.go"]; c.Verdict != trust.Deny || c.Rule != "default" {
		t.Errorf("src/lib.go decided by %s %q", c.Verdict, c.Rule)
	}
	if c := got["src/lib_test.go"]; !strings.Contains(c.Rule, "allow tests") {
		t.Errorf("src/lib_test.go rule %q", c.Rule)
	}
	if r.Complete() {
		t.Error("report with denials is complete")
	}

	for name, content := range map[string]string{
		"src/lib.go":           "package lib\n",
		"src/lib_test.go":      "package lib // new test\n",
		"src/new/more_test.go": "package new\n",
		"src/old.go":           "package lib // old\n",
		".smolvm/policy.toml":  testsOnly,
		".git/HEAD":            "ref: refs/heads/main\n",
	} {
		if got := readFile(t, filepath.Join(tree, name)); got != content {
			t.Errorf("%s = %q, want %q", name, got, content)
		}
	}
	for _, gone := range []string{"src/old_test.go", ".git/hooks"} {
		if _, err := os.Lstat(filepath.Join(tree, gone)); !os.IsNotExist(err) {
			t.Errorf("%s: %v", gone, err)
		}
	}

	recs, err := l.Audit(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var audited []string
	for _, rec := range recs {
		audited = append(audited, rec.Action.Target+" "+rec.Outcome.String())
	}
	slices.Sort(audited)
	wantAudit := []string{
		".smolvm/policy.toml deny", "src/lib.go deny", "src/lib_test.go allow",
		"src/new/more_test.go allow", "src/old.go deny", "src/old_test.go allow",
	}
	if !slices.Equal(audited, wantAudit) {
		t.Errorf("audit:\n%q\nwant\n%q", audited, wantAudit)
	}

	// Applying again finds only what was denied.
	r, err = applyDir(ctx, src, Options{Tree: tree, Ledger: l, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Changes) != 3 {
		t.Errorf("second pass: %+v", r.Changes)
	}
}

// TestApplyDryRun decides without writing, recording or asking.
func TestApplyDryRun(t *testing.T) {
	ctx := context.Background()
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{
		".smolvm/policy.toml": "default = \"deny\"\n[tests]\nallow = [\"**\"]\n[write]\nask = [\"src/**\"]\n",
		"src/a.go":            "a",
	})
	src := copyTree(t, tree)
	writeFiles(t, src, map[string]string{"src/a.go": "b", "a_test.go": "t", "doc.md": "d"})
	l := openLedger(t)
	r, err := applyDir(ctx, src, Options{Tree: tree, Ledger: l, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	got := byPath(r)
	if got["src/a.go"].Verdict != trust.Ask || got["a_test.go"].Verdict != trust.Allow || got["doc.md"].Verdict != trust.Deny {
		t.Fatalf("verdicts: %+v", r.Changes)
	}
	for _, c := range r.Changes {
		if c.Outcome != Skipped {
			t.Errorf("%s: %s", c.Path, c.Outcome)
		}
	}
	if readFile(t, filepath.Join(tree, "src/a.go")) != "a" {
		t.Error("dry run wrote src/a.go")
	}
	if _, err := os.Stat(filepath.Join(tree, "a_test.go")); !os.IsNotExist(err) {
		t.Error("dry run wrote a_test.go")
	}
	if recs, _ := l.Audit(ctx, time.Time{}); len(recs) != 0 {
		t.Errorf("dry run audited %d decisions", len(recs))
	}
	if aps, _ := l.Approvals(ctx, true); len(aps) != 0 {
		t.Errorf("dry run asked %d approvals", len(aps))
	}
}

// TestApplyAsk: an approved ask is applied, a denied or unanswered one is
// not; all asks wait at once.
func TestApplyAsk(t *testing.T) {
	ctx := context.Background()
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{
		".smolvm/policy.toml": "default = \"deny\"\n[approvals]\ntimeout = \"3s\"\n[write]\nask = [\"src/**\"]\n",
		"src/a.go":            "a", "src/b.go": "b", "src/c.go": "c",
	})
	src := copyTree(t, tree)
	writeFiles(t, src, map[string]string{"src/a.go": "A", "src/b.go": "B", "src/c.go": "C"})
	l := openLedger(t)

	answered := make(chan error, 1)
	go func() {
		// Answer a and b once both wait; leave c to time out.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			aps, err := l.Approvals(ctx, false)
			if err != nil {
				answered <- err
				return
			}
			if len(aps) == 3 {
				for _, ap := range aps {
					switch ap.Action.Target {
					case "src/a.go":
						err = l.Answer(ctx, ap.ID, true, "alice", "")
					case "src/b.go":
						err = l.Answer(ctx, ap.ID, false, "bob", "not this one")
					}
					if err != nil {
						answered <- err
						return
					}
				}
				answered <- nil
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		answered <- context.DeadlineExceeded
	}()
	r, err := applyDir(ctx, src, Options{Tree: tree, Ledger: l, Requester: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("approver: %v", err)
	}
	got := byPath(r)
	if c := got["src/a.go"]; c.Outcome != Applied || c.Verdict != trust.Ask {
		t.Errorf("approved: %+v", c)
	}
	if c := got["src/b.go"]; c.Outcome != Denied || !strings.Contains(c.Reason, "bob") || !strings.Contains(c.Reason, "not this one") {
		t.Errorf("denied: %+v", c)
	}
	if c := got["src/c.go"]; c.Outcome != Denied || !strings.Contains(c.Reason, "in time") {
		t.Errorf("timed out: %+v", c)
	}
	for name, want := range map[string]string{"src/a.go": "A", "src/b.go": "b", "src/c.go": "c"} {
		if got := readFile(t, filepath.Join(tree, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// TestApplyUnsafe: nothing is written outside the tree or through a
// symlink, whatever the policy allows.
func TestApplyUnsafe(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	writeFiles(t, outside, map[string]string{"victim": "safe"})
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{
		".smolvm/policy.toml": `default = "allow"`,
		"out":                 "-> " + outside,
		"lib/x.go":            "x",
		"docs/readme":         "-> ../lib/x.go",
	})
	src := copyTree(t, tree)
	os.Remove(filepath.Join(src, "out"))
	writeFiles(t, src, map[string]string{
		"abs":        "-> /etc/passwd",
		"up":         "-> ../../etc/passwd",
		"sub/up":     "-> ..",
		"sub/chain":  "-> up/../etc", // up is the tree root, so this climbs out
		"lib/ok":     "-> ../docs/readme",
		"out/victim": "pwned", // a real directory in the sandbox, a symlink in the tree
	})
	r, err := applyDir(ctx, src, Options{Tree: tree, Ledger: openLedger(t)})
	got := byPath(r)
	for _, p := range []string{"abs", "up", "sub/chain"} {
		if c := got[p]; c.Outcome != Rejected || !strings.Contains(c.Reason, "outside the tree") {
			t.Errorf("%s: %+v", p, c)
		}
	}
	for _, p := range []string{"sub/up", "lib/ok"} {
		if c := got[p]; c.Outcome != Applied {
			t.Errorf("%s: %+v", p, c)
		}
	}
	// Removing the symlink "out" was allowed and happened first, so
	// out/victim lands in a new real directory inside the tree.
	if c := got["out"]; c.Kind != Deleted || c.Outcome != Applied {
		t.Errorf("out: %+v", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, victim) != "safe" {
		t.Fatal("wrote outside the tree")
	}
	if fi, err := os.Lstat(filepath.Join(tree, "out")); err != nil || !fi.IsDir() {
		t.Fatalf("out: %v %v", fi, err)
	}
	for _, p := range []string{"abs", "up", "sub/chain"} {
		if _, err := os.Lstat(filepath.Join(tree, p)); !os.IsNotExist(err) {
			t.Errorf("%s was created: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(tree, "lib/ok")); err != nil || l != "../docs/readme" {
		t.Errorf("lib/ok -> %q %v", l, err)
	}
}

// TestApplyThroughSymlinkParent: when the symlink a file would be written
// through stays (its removal denied), the write fails instead of going
// through it.
func TestApplyThroughSymlinkParent(t *testing.T) {
	outside := t.TempDir()
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{
		".smolvm/policy.toml": "default = \"allow\"\n[write]\ndeny = [\"out\"]\n",
		"out":                 "-> " + outside,
	})
	src := copyTree(t, tree)
	os.Remove(filepath.Join(src, "out"))
	writeFiles(t, src, map[string]string{"out/x": "pwned"})
	r, err := applyDir(context.Background(), src, Options{Tree: tree, Ledger: openLedger(t)})
	if err == nil {
		t.Fatal("no error for a write through a symlink")
	}
	got := byPath(r)
	if got["out"].Outcome != Denied || got["out/x"].Outcome != Failed || !strings.Contains(got["out/x"].Reason, "symlink") {
		t.Fatalf("%+v", r.Changes)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatal("wrote through the symlink")
	}
}

// TestApplyModes: a permission change is a modification and is applied;
// setuid is never copied.
func TestApplyModes(t *testing.T) {
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{".smolvm/policy.toml": `default = "allow"`, "run.sh": "echo", "same": "x"})
	src := copyTree(t, tree)
	os.Chmod(filepath.Join(src, "run.sh"), 0o755)
	writeFiles(t, src, map[string]string{"suid": "x"})
	os.Chmod(filepath.Join(src, "suid"), 0o4755)
	r, err := applyDir(context.Background(), src, Options{Tree: tree, Ledger: openLedger(t)})
	if err != nil {
		t.Fatal(err)
	}
	got := byPath(r)
	if len(got) != 2 || got["run.sh"].Kind != Modified || got["suid"].Kind != Added || !r.Complete() {
		t.Fatalf("%+v", r.Changes)
	}
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "suid": 0o755} {
		fi, err := os.Stat(filepath.Join(tree, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	// Nothing left behind by the atomic writes.
	ents, _ := os.ReadDir(tree)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".smolvm-apply-") {
			t.Errorf("left %s", e.Name())
		}
	}
}

func TestEscapes(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a/up":   "-> ..",
		"a/loop": "-> loop",
		"a/abs":  "-> /tmp",
	})
	for _, tc := range []struct {
		rel, target string
		want        bool
	}{
		{"x", "/etc/passwd", true},
		{"x", "..", true},
		{"x", "a/../..", true},
		{"x", "a/b/../../c", false},
		{"a/x", "../b", false},
		{"a/x", "../../b", true},
		{"a/x", "up", false},
		{"a/x", "up/..", true},
		{"a/x", "up/a/up/a", false},
		{"a/x", "loop", true},
		{"a/x", "abs/x", true},
		{"a/b/x", "./../../c", false},
	} {
		if got := escapes(dir, tc.rel, tc.target); got != tc.want {
			t.Errorf("escapes(%s -> %s) = %v", tc.rel, tc.target, got)
		}
	}
}

// TestApplyOwner: run as root, smolvm leaves the tree owned by its owner:
// a replaced file keeps its owner, a new one takes its directory's.
func TestApplyOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	tree := t.TempDir()
	writeFiles(t, tree, map[string]string{".smolvm/policy.toml": `default = "allow"`, "mine": "x"})
	os.Chown(tree, 1000, 1000)
	os.Chown(filepath.Join(tree, "mine"), 1001, 1001)
	src := copyTree(t, tree)
	writeFiles(t, src, map[string]string{"mine": "y", "new/file": "z"})
	if _, err := applyDir(context.Background(), src, Options{Tree: tree, Ledger: openLedger(t)}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"mine": 1001, "new": 1000, "new/file": 1000} {
		fi, err := os.Lstat(filepath.Join(tree, name))
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != want {
			t.Errorf("%s owned by %d, want %d", name, uid, want)
		}
	}
}

// FuzzEscapes: a symlink escapes judges safe never resolves, on the real
// file system, to a place outside the directory.
func FuzzEscapes(f *testing.F) {
	for _, s := range []string{"..", "../..", "up/..", "up/a/up", "b/../../x", "a/./up/../b", "/etc", "loop", "ok"} {
		f.Add(s)
	}
	dir := f.TempDir()
	writeFiles(f, dir, map[string]string{
		"a/up":    "-> ..",
		"a/b/c":   "c",
		"a/loop":  "-> loop",
		"a/ok":    "-> b/c",
		"a/chain": "-> up/a/up",
	})
	link := filepath.Join(dir, "a", "x")
	base, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsRune(target, 0) {
			return
		}
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return
		}
		if escapes(dir, "a/x", target) {
			return
		}
		resolved, err := filepath.EvalSymlinks(link)
		if err != nil {
			return // dangling or a loop: nothing to reach
		}
		if rel, err := filepath.Rel(base, resolved); err != nil || !filepath.IsLocal(rel) && rel != "." {
			t.Fatalf("a/x -> %q resolves to %s, outside", target, resolved)
		}
	})
}
