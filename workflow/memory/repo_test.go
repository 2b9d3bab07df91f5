package memory

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitEnv isolates test repositories from the user's git configuration.
func gitEnv(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Test",
		"GIT_AUTHOR_EMAIL":    "test@example.com",
		"GIT_COMMITTER_NAME":  "Test",
		"GIT_COMMITTER_EMAIL": "test@example.com",
	} {
		t.Setenv(k, v)
	}
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commit(t *testing.T, dir, msg string) {
	t.Helper()
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-q", "-m", msg)
}

// newRepo makes a git repository with files committed on branch main.
func newRepo(t *testing.T, files map[string]string) (*Repo, string) {
	t.Helper()
	gitEnv(t)
	dir := t.TempDir()
	run(t, dir, "-c", "init.defaultBranch=main", "init", "-q")
	for name, content := range files {
		write(t, dir, name, content)
	}
	commit(t, dir, "initial")
	r, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func add(t *testing.T, r *Repo, text string, anchors ...string) *Fact {
	t.Helper()
	o := AddOptions{Text: text, Kind: Convention, Author: "human:alice"}
	for _, s := range anchors {
		a, err := ParseAnchor(s)
		if err != nil {
			t.Fatal(err)
		}
		o.Anchors = append(o.Anchors, a)
	}
	f, err := r.Add(context.Background(), o)
	if err != nil {
		t.Fatalf("add %q: %v", text, err)
	}
	return f
}

// verify runs Verify and returns the drift of each stale fact by text.
func verify(t *testing.T, r *Repo) map[string][]string {
	t.Helper()
	res, err := r.Verify(context.Background(), "human:ci")
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string][]string{}
	for _, x := range res {
		if x.Fact.Status == Stale {
			for _, a := range x.Drifted {
				stale[x.Fact.Text] = append(stale[x.Fact.Text], a.String()+": "+a.Drift)
			}
		}
	}
	return stale
}

func wantStale(t *testing.T, got map[string][]string, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("stale facts = %v, want %v", got, want)
	}
	for text, drift := range want {
		if d := strings.Join(got[text], "; "); d != drift {
			t.Errorf("fact %q drift = %q, want %q", text, d, drift)
		}
	}
}

func reload(t *testing.T, r *Repo, id string) *Fact {
	t.Helper()
	f, err := r.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const goSrc = `package a

// Foo is anchored by symbol.
func Foo() int {
	return 1
}

func Bar() int {
	return 2
}

type T struct{}

func (*T) M() {}
`

func TestVerifyEditRenameDelete(t *testing.T) {
	ctx := context.Background()
	r, dir := newRepo(t, map[string]string{
		"a.go":      goSrc,
		"lines.txt": "one\ntwo\nthree\nfour\nfive\n",
		"mod.txt":   "v1\n",
		"old.txt":   "moving\n",
		"gone.txt":  "bye\n",
		"keep.txt":  "stays\n",
		"pkg/x.txt": "x\n",
	})
	add(t, r, "symbol Foo", "a.go#Foo")
	add(t, r, "method T.M", "a.go#T.M")
	lines := add(t, r, "lines two-three", "lines.txt:2-3")
	add(t, r, "whole mod", "mod.txt")
	moved := add(t, r, "whole old", "old.txt")
	add(t, r, "whole gone", "gone.txt")
	add(t, r, "keep and dir", "keep.txt", "pkg")
	commit(t, dir, "facts")

	wantStale(t, verify(t, r), nil)

	// Edits outside the anchored lines and symbols, and in anchored files.
	write(t, dir, "a.go", strings.Replace(goSrc, "return 2", "return 22", 1))
	write(t, dir, "lines.txt", "zero\none\ntwo\nthree\nfour\nfive\nsix\n")
	write(t, dir, "mod.txt", "v2\n")
	run(t, dir, "mv", "old.txt", "new.txt")
	run(t, dir, "rm", "-q", "gone.txt")
	write(t, dir, "pkg/y.txt", "y\n")
	commit(t, dir, "change things")

	wantStale(t, verify(t, r), map[string]string{
		"whole mod":  "mod.txt: modified",
		"whole old":  "old.txt: renamed to new.txt",
		"whole gone": "gone.txt: deleted",
	})
	if f := reload(t, r, lines.ID); f.Status != Valid || f.Anchors[0].String() != "lines.txt:3-4" {
		t.Errorf("moved line range: status %s, anchor %s; want valid lines.txt:3-4", f.Status, f.Anchors[0])
	}

	// Only the anchored lines count.
	write(t, dir, "lines.txt", "zero\none\ntwo\nTHREE\nfour\nfive\nsix\n")
	write(t, dir, "a.go", strings.Replace(goSrc, "return 1", "return 11", 1))
	wantStale(t, verify(t, r), map[string]string{
		"whole mod":       "mod.txt: modified",
		"whole old":       "old.txt: renamed to new.txt",
		"whole gone":      "gone.txt: deleted",
		"lines two-three": "lines.txt:3-4: modified (lines 3-4 changed)",
		"symbol Foo":      "a.go#Foo: modified (symbol Foo changed)",
	})

	// Confirm follows the rename and makes the fact valid.
	f, err := r.Confirm(ctx, moved.ID, "human:bob", "still true after the move")
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != Valid || f.Anchors[0].Path != "new.txt" || f.Anchors[0].Drift != "" {
		t.Errorf("confirmed: %s %+v", f.Status, f.Anchors[0])
	}
	// A stale fact whose code is restored becomes valid again.
	write(t, dir, "mod.txt", "v1\n")
	// Symbols that disappear.
	write(t, dir, "a.go", "package a\n\nfunc Foo() int {\n\treturn 11\n}\n")
	got := verify(t, r)
	wantStale(t, got, map[string]string{
		"whole gone":      "gone.txt: deleted",
		"lines two-three": "lines.txt:3-4: modified (lines 3-4 changed)",
		"symbol Foo":      "a.go#Foo: modified (symbol Foo changed)",
		"method T.M":      "a.go#T.M: symbol T.M gone",
	})
	facts, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range facts {
		if f.Text == "whole mod" {
			last := f.History[len(f.History)-1]
			if f.Status != Valid || last.Action != "revalidate" {
				t.Errorf("restored fact: %s, last event %+v", f.Status, last)
			}
		}
	}
	// A deleted anchor cannot be confirmed, only re-anchored or forgotten.
	for _, f := range facts {
		if f.Text == "whole gone" {
			if _, err := r.Confirm(ctx, f.ID, "human:bob", ""); err == nil {
				t.Error("confirm of a deleted anchor succeeded")
			}
			a, _ := ParseAnchor("keep.txt")
			e, err := r.Edit(ctx, f.ID, EditOptions{Anchors: []Anchor{a}, By: "human:bob", Why: "moved into keep"})
			if err != nil {
				t.Fatal(err)
			}
			if e.Status != Valid || !strings.Contains(e.History[len(e.History)-1].Action, "gone.txt -> keep.txt") {
				t.Errorf("re-anchored: %s %+v", e.Status, e.History[len(e.History)-1])
			}
		}
	}
}

func TestVerifyAfterRebase(t *testing.T) {
	r, dir := newRepo(t, map[string]string{"x.go": "package x\n", "z.txt": "z\n"})
	run(t, dir, "checkout", "-q", "-b", "feature")
	write(t, dir, "y.txt", "a\nb\nc\nd\n")
	commit(t, dir, "add y")
	onX := add(t, r, "about x", "x.go")
	onY := add(t, r, "about y", "y.txt:2-3")
	commit(t, dir, "remember")
	created := onY.CreatedCommit
	if created == "" {
		t.Fatal("no created commit recorded")
	}

	run(t, dir, "checkout", "-q", "main")
	write(t, dir, "x.go", "package x\n\nconst changed = true\n")
	commit(t, dir, "change x upstream")
	run(t, dir, "checkout", "-q", "feature")
	run(t, dir, "rebase", "-q", "main")
	run(t, dir, "reflog", "expire", "--expire=now", "--all")
	run(t, dir, "gc", "-q", "--prune=now")
	if err := exec.Command("git", "-C", dir, "cat-file", "-e", created+"^{commit}").Run(); err == nil {
		t.Fatalf("created commit %s still exists after rebase and gc", created)
	}

	wantStale(t, verify(t, r), map[string]string{"about x": "x.go: modified"})

	run(t, dir, "mv", "y.txt", "w.txt")
	commit(t, dir, "rename y")
	run(t, dir, "mv", "w.txt", "v.txt")
	commit(t, dir, "rename w")
	wantStale(t, verify(t, r), map[string]string{
		"about x": "x.go: modified",
		"about y": "y.txt:2-3: renamed to v.txt",
	})
	if f := reload(t, r, onX.ID); f.Status != Stale {
		t.Errorf("about x: %s", f.Status)
	}
}

func TestRenameFoundByBlob(t *testing.T) {
	// A rename git cannot see in history (the delete and add are separate
	// commits) is still found by the file's blob id.
	r, dir := newRepo(t, map[string]string{"a.txt": "same content\n"})
	add(t, r, "about a", "a.txt")
	run(t, dir, "rm", "-q", "a.txt")
	commit(t, dir, "delete")
	write(t, dir, "b/a.txt", "same content\n")
	commit(t, dir, "re-add elsewhere")
	wantStale(t, verify(t, r), map[string]string{"about a": "a.txt: renamed to b/a.txt"})
}

func TestRecallRanking(t *testing.T) {
	ctx := context.Background()
	r, dir := newRepo(t, map[string]string{
		"pkg/sub/file.go":  "l1\nl2\nl3\nl4\n",
		"pkg/sub/other.go": "o\n",
		"pkg/top.go":       "t\n",
		"else/x.go":        "x\n",
	})
	exact := add(t, r, "exact lines of file", "pkg/sub/file.go:3-4")
	dirF := add(t, r, "the sub directory", "pkg/sub")
	anc := add(t, r, "the pkg tree", "pkg")
	sib := add(t, r, "a sibling", "pkg/sub/other.go")
	add(t, r, "unrelated", "else/x.go")
	drifting := add(t, r, "first line", "pkg/sub/file.go:1")
	forgot := add(t, r, "forgotten exact", "pkg/sub/file.go")
	if _, err := r.Forget(ctx, forgot.ID, "human:bob", "wrong"); err != nil {
		t.Fatal(err)
	}
	prop, err := r.Add(ctx, AddOptions{Text: "proposed exact", Kind: Gotcha, Author: "agent:claude-1",
		Anchors: []Anchor{{Path: "pkg/sub/file.go"}}, Proposed: true})
	if err != nil {
		t.Fatal(err)
	}
	// Drift not yet verified still keeps a fact out of recall.
	write(t, dir, "pkg/sub/file.go", "CHANGED\nl2\nl3\nl4\n")

	ids := func(ms []Match) []string {
		var s []string
		for _, m := range ms {
			s = append(s, m.Fact.Text)
		}
		return s
	}
	ms, err := r.Recall(ctx, dir, "pkg/sub/file.go")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{exact.Text, dirF.Text, anc.Text, sib.Text}
	if got := ids(ms); !slices.Equal(got, want) {
		t.Errorf("recall file = %q, want %q", got, want)
	}
	for _, m := range ms {
		if m.Fact.ID == drifting.ID || m.Fact.ID == prop.ID {
			t.Errorf("recall returned %s fact %q", m.Fact.Status, m.Fact.Text)
		}
	}
	if len(ms) == 4 && (ms[0].Score <= ms[1].Score || ms[1].Score <= ms[2].Score || ms[2].Score <= ms[3].Score) {
		t.Errorf("scores not strictly ranked: %d %d %d %d", ms[0].Score, ms[1].Score, ms[2].Score, ms[3].Score)
	}

	// A relative path resolves against the caller's directory.
	ms, err = r.Recall(ctx, filepath.Join(dir, "pkg"), "sub")
	if err != nil {
		t.Fatal(err)
	}
	// The queried directory, then its parent, then the two anchors inside
	// it, which tie (newer first, at millisecond resolution).
	got := ids(ms)
	if len(got) != 4 || got[0] != dirF.Text || got[1] != anc.Text || ms[2].Score != ms[3].Score ||
		!slices.Contains(got[2:], exact.Text) || !slices.Contains(got[2:], sib.Text) {
		t.Errorf("recall dir = %q", got)
	}

	// Text queries: more words matched rank higher, the whole phrase more.
	add(t, r, "Retry with exponential backoff on 503")
	add(t, r, "Backoff is capped at 30s")
	add(t, r, "retry budget lives with the client")
	ms, err = r.Recall(ctx, dir, "retry with exponential backoff")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(ms), []string{"Retry with exponential backoff on 503", "retry budget lives with the client", "Backoff is capped at 30s"}; !slices.Equal(got, want) {
		t.Errorf("recall text = %q, want %q", got, want)
	}
	if ms, _ := r.Recall(ctx, dir, "nothing matches zebra"); len(ms) != 0 {
		t.Errorf("recall of unknown words = %q", ids(ms))
	}
}

func TestReview(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t, map[string]string{"a.txt": "a\n"})
	old := add(t, r, "old way", "a.txt")
	propose := func(text, supersedes string) *Fact {
		f, err := r.Add(ctx, AddOptions{Text: text, Kind: Decision, Author: "agent:claude-1",
			Anchors: []Anchor{{Path: "a.txt"}}, Proposed: true, Supersedes: supersedes})
		if err != nil {
			t.Fatal(err)
		}
		if f.Status != Proposed || !f.ValidFrom.IsZero() {
			t.Fatalf("proposal %q: status %s valid_from %v", text, f.Status, f.ValidFrom)
		}
		return f
	}
	good := propose("new way", old.ID)
	bad := propose("wrong way", "")
	if ms, _ := r.Recall(ctx, r.Root(), "a.txt"); len(ms) != 1 || ms[0].Fact.ID != old.ID {
		t.Errorf("recall before review returned %d facts", len(ms))
	}

	f, err := r.Review(ctx, good.ID, true, "human:alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != Valid || f.ValidFrom.IsZero() {
		t.Errorf("accepted: %s", f.Status)
	}
	if o := reload(t, r, old.ID); o.Status != Forgotten || o.SupersededBy != good.ID || o.InvalidatedAt.IsZero() {
		t.Errorf("superseded fact: %s superseded_by %q", o.Status, o.SupersededBy)
	}
	f, err = r.Review(ctx, bad.ID, false, "human:alice", "contradicts the ADR")
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != Rejected || f.Reason != "contradicts the ADR" {
		t.Errorf("rejected: %s %q", f.Status, f.Reason)
	}
	if _, err := r.Review(ctx, bad.ID, true, "human:alice", ""); err == nil {
		t.Error("accepting a rejected fact succeeded")
	}
	if _, err := r.Review(ctx, good.ID, true, "human:alice", ""); err == nil {
		t.Error("reviewing a valid fact succeeded")
	}
	ms, _ := r.Recall(ctx, r.Root(), "a.txt")
	if len(ms) != 1 || ms[0].Fact.ID != good.ID {
		t.Errorf("recall after review = %v", ms)
	}
}

func TestForgetKeepsHistory(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t, map[string]string{"a.txt": "a\n"})
	f := add(t, r, "first text", "a.txt")
	if _, err := r.Edit(ctx, f.ID, EditOptions{Text: "second text", Kind: Gotcha, By: "human:bob", Why: "typo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Forget(ctx, f.ID, "human:carol", ""); err == nil {
		t.Error("forget without a reason succeeded")
	}
	if _, err := r.Forget(ctx, f.ID[:8], "human:carol", "no longer true"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(r.Path(f.ID))
	if err != nil {
		t.Fatalf("forgotten fact file is gone: %v", err)
	}
	g, err := ParseFact(data)
	if err != nil {
		t.Fatal(err)
	}
	if g.Status != Forgotten || g.Text != "second text" || g.Reason != "no longer true" || g.InvalidatedAt.IsZero() {
		t.Errorf("forgotten fact: %s %q %q", g.Status, g.Text, g.Reason)
	}
	var got []string
	for _, e := range g.History {
		got = append(got, e.By+" "+e.Action+" "+e.Why)
	}
	want := []string{
		"human:alice add ",
		"human:bob edit: text; kind convention -> gotcha typo",
		"human:carol forget no longer true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("history = %q, want %q", got, want)
	}
	if _, err := r.Edit(ctx, f.ID, EditOptions{Text: "again", By: "human:bob"}); err == nil {
		t.Error("editing a forgotten fact succeeded")
	}
	if _, err := r.Forget(ctx, f.ID, "bob", "x"); err == nil {
		t.Error("forget by a malformed actor succeeded")
	}
}

func TestInstallHook(t *testing.T) {
	ctx := context.Background()
	r, dir := newRepo(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, ".git/hooks/post-commit", "#!/bin/sh\necho existing\n")
	p, err := r.InstallHook(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.InstallHook(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.Contains(s, "echo existing\n") || strings.Count(s, HookLine) != 1 {
		t.Errorf("hook:\n%s", s)
	}
	if info, _ := os.Stat(p); info.Mode()&0o100 == 0 {
		t.Errorf("hook mode %v is not executable", info.Mode())
	}
	// The hook runs on commit without failing it, even without smolvm.
	write(t, dir, "b.txt", "b\n")
	commit(t, dir, "with hook")
}
