package branch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/forge"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/trust"
)

// testSh is the repositories' CI: TAP from plain sh. It checks add, that
// VERSION is a number of at least 1, and that every cmd/*.sh prints ok.
const testSh = `#!/bin/sh
n=0; bad=0
check() { n=$((n+1)); if [ "$2" = "$3" ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; echo "  # got '$2', want '$3'"; bad=1; fi; }
echo "TAP version 13"
check add "$(. ./lib.sh 2>/dev/null; add 2 3)" 5
check version "$( (. ./lib.sh && [ "$VERSION" -ge 1 ] && echo ok) 2>/dev/null)" ok
for f in cmd/*.sh; do check "$(basename "$f")" "$(sh "$f" 2>&1)" ok; done
echo "1..$n"
exit $bad
`

func repoFiles(lib string) map[string]string {
	return map[string]string{"lib.sh": lib, "test.sh": testSh, "cmd/main.sh": ". ./lib.sh; greet\n"}
}

const goodLib = "add() { echo $(($1 + $2)); }\ngreet() { echo ok; }\nVERSION=1\n"

func gitRepo(t testing.TB, files map[string]string) string { return testenv.GitRepo(t, files) }

func newCoordinator(t testing.TB) *Coordinator {
	t.Helper()
	env := testmgr.New(t)
	ctx := context.Background()
	l, err := runner.OpenLog(ctx, env.Store)
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(ctx, env.Store)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := trust.OpenLedger(ctx, env.Store)
	if err != nil {
		t.Fatal(err)
	}
	return &Coordinator{Service: env.Manager, Runner: &runner.Runner{Service: env.Manager, Log: l, Ledger: ledger}, Store: st,
		Dir: filepath.Join(env.Dir, "branch"), RunsDir: filepath.Join(env.Dir, "agent", "runs")}
}

// doAgent is a scripted agent CLI: it runs the shell command on the
// task's "do: " line.
const doAgent = `sh -c "$(sed -n 's/^do: //p' "$SMOLVM_AGENT_PROMPT" | head -n 1)"`

func agents(cmds ...string) func(k int) (runner.Agent, string, error) {
	return func(k int) (runner.Agent, string, error) {
		c := cmds[(k-1)%len(cmds)]
		return &runner.External{Command: c}, c, nil
	}
}

func options(repo string, mode Mode) Options {
	return Options{Repo: repo, Mode: mode, CI: CI{Command: "sh test.sh", Source: "--test"},
		Setup: "echo once >> /tmp/setup-count", Budget: runner.Budget{Iterations: 1, Wall: 90 * time.Second},
		FlakyReruns: -1, StuckAfter: 1, Concurrency: 3}
}

func show(t *testing.T, g gitDir, commit, file string) string {
	t.Helper()
	out, err := g.run(context.Background(), "show", commit+":"+file)
	if err != nil {
		t.Fatalf("show %s: %v", file, err)
	}
	return out
}

func fanout(t testing.TB, c *Coordinator, o Options) (*Run, []*Branch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := c.Fanout(ctx, o)
	if err != nil {
		t.Fatalf("fanout: %v", err)
	}
	r, bs, err := c.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := max(len(o.Tasks), o.N); r.State != Done || len(bs) != want {
		t.Fatalf("run %+v, %d branches", r, len(bs))
	}
	for _, b := range bs {
		t.Logf("branch %d: %s (%s) %s, %d lines, %s", b.K, b.State, b.Reason, resultLine(b.Result), b.DiffLines, b.Elapsed.Round(time.Millisecond))
	}
	return r, bs
}

// Best of three: one agent breaks add differently (and VERSION: its
// change fails more checks than the base, which stays the best), one
// fixes it, one hangs until its budget kills it. The passing one wins;
// set-up ran once, before the checkpoint every branch forked from. The
// failed change is the red branch's, not "no change".
func TestBestOfThree(t *testing.T) {
	c := newCoordinator(t)
	repo := gitRepo(t, repoFiles(strings.Replace(goodLib, "$1 + $2", "$1 - $2", 1)))
	o := options(repo, BestOfN)
	o.Task, o.N = "Fix add.", 3
	o.Budget.Wall = 25 * time.Second
	seen := "cp /tmp/setup-count seen-setup && "
	o.Agent = agents(seen+"sed -i 's/\\$1 - \\$2/$1 * $2/; s/VERSION=1/VERSION=0/' lib.sh", seen+"sed -i 's/\\$1 - \\$2/$1 + $2/' lib.sh", "sleep 600")
	r, bs := fanout(t, c, o)
	if bs[0].State != Red || bs[1].State != Passed || bs[2].State != Killed {
		t.Fatalf("states %s %s %s", bs[0].State, bs[1].State, bs[2].State)
	}
	if !strings.Contains(bs[0].Reason, "its change failed CI: 1 passed, 2 failed") || bs[0].DiffLines == 0 || bs[0].Result == nil || bs[0].Result.Passed != 1 {
		t.Errorf("red branch: %s, %d lines, CI %s", bs[0].Reason, bs[0].DiffLines, resultLine(bs[0].Result))
	}
	if !strings.Contains(bs[2].Reason, "wall budget") || bs[2].Elapsed > o.Budget.Wall+Grace {
		t.Errorf("hung branch: %s after %s", bs[2].Reason, bs[2].Elapsed)
	}
	g := gitDir(r.Git)
	for _, b := range bs[:2] {
		if got := show(t, g, b.Commit, "seen-setup"); got != "once" {
			t.Errorf("branch %d saw the set-up counter %q, want one run", b.K, got)
		}
		if got, _ := g.run(context.Background(), "rev-parse", "refs/heads/"+b.Name); got != b.Commit {
			t.Errorf("branch %s is %s, want %s", b.Name, got, b.Commit)
		}
	}
	if !strings.Contains(show(t, g, bs[1].Commit, "lib.sh"), "$1 + $2") {
		t.Errorf("branch 2's commit lacks its fix")
	}
	r, err := c.Merge(context.Background(), r.ID, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != Merged || !strings.Contains(r.Summary, "Winner: branch 2") {
		t.Fatalf("merge: %s\n%s", r.State, r.Summary)
	}
	if got, _ := g.run(context.Background(), "rev-parse", "refs/heads/"+r.Integration); got != bs[1].Commit {
		t.Errorf("integration = %s, want branch 2's %s", got, bs[1].Commit)
	}
}

func steps(t *testing.T, c *Coordinator, id string) []*Step {
	t.Helper()
	ss, err := c.Store.Steps(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		t.Logf("step %d %s branch %d: %s", s.N, s.Kind, s.Branch, headLine(s.Note))
	}
	return ss
}

func kinds(ss []*Step, kind string) []*Step {
	var out []*Step
	for _, s := range ss {
		if s.Kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// Three sub-tasks on different files merge one after the other, each
// with CI on the merged state.
func TestSplitMergesAll(t *testing.T) {
	c := newCoordinator(t)
	files := repoFiles(goodLib)
	// CI is the run: steps of a GitHub job, run in the sandbox.
	files[".github/workflows/ci.yml"] = "jobs:\n  test:\n    steps:\n      - uses: actions/checkout@v4\n      - run: sh test.sh\n"
	repo := gitRepo(t, files)
	o := options(repo, Split)
	ci, err := GitHubCI(repo, "test")
	if err != nil || len(ci.Unsupported) != 1 {
		t.Fatalf("CI %+v, %v", ci, err)
	}
	o.CI = ci
	o.Tasks = []string{
		"do: printf '. ./lib.sh; greet\\n' > cmd/alpha.sh",
		"do: printf '. ./lib.sh; greet\\n' > cmd/beta.sh",
		"do: printf 'more() { echo ok; }\\n' > more.sh",
	}
	o.Agent = agents(doAgent)
	r, bs := fanout(t, c, o)
	for _, b := range bs {
		if b.State != Passed {
			t.Fatalf("branch %d: %s (%s)", b.K, b.State, b.Reason)
		}
	}
	m, err := c.Conflicts(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Branches {
		if m.Count(i) != 0 {
			t.Errorf("branch %d conflicts: %v", m.Branches[i], m.Files[i])
		}
	}
	r, err = c.Merge(context.Background(), r.ID, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ss := steps(t, c, r.ID)
	merged := kinds(ss, "merged")
	pr, err := c.PR(context.Background(), r.ID, forge.Issue{}, "main")
	if err != nil || !strings.Contains(pr.Body, "3 merged") || !strings.Contains(pr.Body, "uses actions/checkout@v4") ||
		!strings.Contains(pr.Diff, "+more() { echo ok; }") || pr.Head != r.Integration {
		t.Errorf("PR %+v, %v", pr, err)
	}
	if len(merged) != 3 {
		t.Fatalf("merged %d of 3:\n%s", len(merged), r.Summary)
	}
	for _, s := range merged {
		// CI ran on each merged state: 3 tests, then 4, then 5 (two new
		// cmd scripts; more.sh adds none).
		if s.Result == nil || !s.Result.Green() || s.Result.Passed < 3 {
			t.Errorf("step %d: CI %v", s.N, s.Result)
		}
	}
	g := gitDir(r.Git)
	head, _ := g.run(context.Background(), "rev-parse", "refs/heads/"+r.Integration)
	for _, f := range []string{"cmd/alpha.sh", "cmd/beta.sh", "more.sh"} {
		show(t, g, head, f)
	}
}

// Each branch passes alone; together the rename breaks the new caller.
// The merge is clean, CI after it is red, and the second branch is
// ejected while the first stays in.
func TestSemanticConflictEjected(t *testing.T) {
	c := newCoordinator(t)
	repo := gitRepo(t, repoFiles(goodLib))
	o := options(repo, Split)
	o.Tasks = []string{
		"do: sed -i 's/greet/hello/' lib.sh cmd/main.sh",
		"do: printf '. ./lib.sh; greet\\n' > cmd/extra.sh",
	}
	o.Agent = agents(doAgent)
	r, bs := fanout(t, c, o)
	if bs[0].State != Passed || bs[1].State != Passed {
		t.Fatalf("states %s %s", bs[0].State, bs[1].State)
	}
	r, err := c.Merge(context.Background(), r.ID, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ss := steps(t, c, r.ID)
	if m := kinds(ss, "merged"); len(m) != 1 || m[0].Branch != 1 {
		t.Fatalf("merged: %+v\n%s", m, r.Summary)
	}
	ci := kinds(ss, "ci")
	if len(ci) != 1 || ci[0].Branch != 2 || ci[0].Result == nil || ci[0].Result.Status("extra.sh") != "fail" {
		t.Fatalf("no red CI step for branch 2: %+v", ci)
	}
	if !strings.Contains(r.Summary, "branch 2: ejected: CI failed after the merge") {
		t.Errorf("summary:\n%s", r.Summary)
	}
}

// Both branches change the same line. merge-tree finds it up front; a
// resolver that leaves the markers fails CI and the branch is ejected; a
// resolver that writes a working file is accepted.
func TestTextualConflictResolved(t *testing.T) {
	c := newCoordinator(t)
	repo := gitRepo(t, repoFiles(goodLib))
	o := options(repo, Split)
	o.Tasks = []string{"do: sed -i 's/VERSION=1/VERSION=2/' lib.sh", "do: sed -i 's/VERSION=1/VERSION=3/' lib.sh"}
	o.Agent = agents(doAgent)
	r, _ := fanout(t, c, o)
	m, err := c.Conflicts(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Branches) != 2 || strings.Join(m.Files[0][1], ",") != "lib.sh" {
		t.Fatalf("matrix %+v", m)
	}
	resolver := func(cmd string) func() (runner.Agent, string, error) {
		return func() (runner.Agent, string, error) { return &runner.External{Command: cmd}, "resolver", nil }
	}
	mo := MergeOptions{Resolver: resolver("true"), Budget: runner.Budget{Iterations: 1, Wall: time.Minute}}
	r, err = c.Merge(context.Background(), r.ID, mo)
	if err != nil {
		t.Fatal(err)
	}
	ss := steps(t, c, r.ID)
	if len(kinds(ss, "conflict")) != 1 || len(kinds(ss, "resolve")) != 1 || len(kinds(ss, "ejected")) != 1 {
		t.Fatalf("lazy resolver:\n%s", r.Summary)
	}
	mo.Resolver = resolver(`printf 'add() { echo $(($1 + $2)); }\ngreet() { echo ok; }\nVERSION=3\n' > lib.sh`)
	r, err = c.Merge(context.Background(), r.ID, mo)
	if err != nil {
		t.Fatal(err)
	}
	ss = steps(t, c, r.ID)
	last := kinds(ss, "merged")
	if len(last) != 3 || last[2].Branch != 2 || !strings.Contains(last[2].Note, "resolved") || !last[2].Result.Green() {
		t.Fatalf("good resolver:\n%s", r.Summary)
	}
	g := gitDir(r.Git)
	head, _ := g.run(context.Background(), "rev-parse", "refs/heads/"+r.Integration)
	if lib := show(t, g, head, "lib.sh"); !strings.Contains(lib, "VERSION=3") || strings.Contains(lib, "<<<<") {
		t.Errorf("integration lib.sh:\n%s", lib)
	}
}

// Bad input loses nothing: a dirty repository is refused before anything
// starts; a failing set-up fails the run and its branches with the
// set-up's output.
func TestFanoutRefuses(t *testing.T) {
	c := newCoordinator(t)
	repo := gitRepo(t, repoFiles(goodLib))
	o := options(repo, Split)
	o.Tasks, o.Agent = []string{"do: true"}, agents(doAgent)
	os.WriteFile(filepath.Join(repo, "new.txt"), []byte("x"), 0o644)
	if _, err := c.Fanout(context.Background(), o); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "uncommitted") {
		t.Fatalf("dirty repo: %v", err)
	}
	os.Remove(filepath.Join(repo, "new.txt"))
	o.Setup = "echo no such package >&2; exit 3"
	r, err := c.Fanout(context.Background(), o)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no such package") || r == nil {
		t.Fatalf("failing set-up: %v", err)
	}
	r, bs, err := c.Get(context.Background(), r.ID)
	if err != nil || r.State != Failed || len(bs) != 1 || bs[0].State != Failed {
		t.Fatalf("after a failed set-up: %+v %+v %v", r, bs, err)
	}
	if _, err := c.Merge(context.Background(), r.ID, MergeOptions{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("merge of a run without a set-up: %v", err)
	}
}
