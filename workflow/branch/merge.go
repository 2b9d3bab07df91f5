package branch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/proc"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// Step is one entry of a merge queue's log.
type Step struct {
	N       int       `json:"n"`
	Created time.Time `json:"created"`
	Branch  int       `json:"branch"` // 0 for the run as a whole
	// Kind: rank, winner, merge, conflict, ci, resolve, merged, ejected,
	// done.
	Kind   string            `json:"kind"`
	Target string            `json:"target,omitempty"` // the integration commit it started from
	Commit string            `json:"commit,omitempty"` // what it made
	Files  []string          `json:"files,omitempty"`  // conflicted paths
	Result *testparse.Result `json:"result,omitempty"` // CI evidence
	Note   string            `json:"note,omitempty"`
}

// Matrix is what git merge-tree says of every pair of passing branches:
// Files[i][j] are the paths branches Branches[i] and Branches[j]
// conflict on (none: they merge cleanly).
type Matrix struct {
	Branches []int        `json:"branches"`
	Files    [][][]string `json:"files"`
}

// Count is how many other branches branch index i conflicts with.
func (m *Matrix) Count(i int) int {
	n := 0
	for j := range m.Branches {
		if j != i && len(m.Files[i][j]) > 0 {
			n++
		}
	}
	return n
}

// Conflicts merges every pair of run's passing branches with git
// merge-tree (no work tree, nothing written but objects).
func (c *Coordinator) Conflicts(ctx context.Context, id string) (*Matrix, error) {
	r, bs, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return conflicts(ctx, gitDir(r.Git), passing(bs))
}

func conflicts(ctx context.Context, g gitDir, bs []*Branch) (*Matrix, error) {
	m := &Matrix{Files: make([][][]string, len(bs))}
	for i := range bs {
		m.Branches = append(m.Branches, bs[i].K)
		m.Files[i] = make([][]string, len(bs))
	}
	for i := range bs {
		for j := i + 1; j < len(bs); j++ {
			_, files, err := g.mergeTree(ctx, bs[i].Commit, bs[j].Commit)
			if err != nil {
				return nil, err
			}
			m.Files[i][j], m.Files[j][i] = files, files
		}
	}
	return m, nil
}

func passing(bs []*Branch) []*Branch {
	var out []*Branch
	for _, b := range bs {
		if b.Green() && b.Commit != "" {
			out = append(out, b)
		}
	}
	return out
}

// MergeOptions describe a merge queue.
type MergeOptions struct {
	// Resolver returns the agent given a conflict (both sides and the CI
	// failure, in a fork); nil ejects conflicting branches at once.
	Resolver func() (runner.Agent, string, error)
	// Budget bounds each resolution (the runner's budget).
	Budget      runner.Budget
	TestTimeout time.Duration
	// Progress, if set, sees every step as it is logged.
	Progress func(Step)
}

// Merge runs run id's merge queue. Best-of-N: the branches are ranked by
// CI result, then diff size, then interventions, and the first wins.
// Split: the passing branches merge one at a time onto the integration
// branch, fewest pairwise conflicts first; CI runs on every merged state
// in a fresh fork of the set-up checkpoint. A conflict (textual, or CI
// red after the merge) goes to the resolver in a fork; its resolution
// counts only if CI passes, else the branch is ejected and the rest go
// on. Either way the run ends with branch smolvm/RUN/integration and a
// summary.
func (c *Coordinator) Merge(ctx context.Context, id string, o MergeOptions) (*Run, error) {
	r, bs, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	// A run whose smolvm was killed merges the branches that finished.
	if going(r.State) || r.Snapshot == "" {
		return nil, errdefs.New(errdefs.ErrConflict, fmt.Sprintf("run %s is %s (%s): merge needs every branch finished", id, r.State, r.Reason))
	}
	q := &queue{c: c, r: r, g: gitDir(r.Git), o: o, start: time.Now()}
	r.State, r.Reason, r.Owner = Merging, "", proc.Self()
	if err := c.Store.SaveRun(ctx, r); err != nil {
		return nil, err
	}
	var summary string
	if r.Mode == BestOfN {
		summary, err = q.pick(ctx, bs)
	} else {
		summary, err = q.split(ctx, bs)
	}
	if err != nil {
		// The branches stand; merge may be run again.
		r.State, r.Reason = Done, "merge: "+err.Error()
		c.Store.SaveRun(ctx, r)
		return r, err
	}
	r.State, r.Summary, r.Integration = Merged, summary, fmt.Sprintf("smolvm/%s/integration", r.ID)
	q.log(ctx, Step{Kind: "done", Commit: q.target, Note: fmt.Sprintf("integration branch %s", r.Integration)})
	return r, c.Store.SaveRun(ctx, r)
}

type queue struct {
	c      *Coordinator
	r      *Run
	g      gitDir
	o      MergeOptions
	start  time.Time
	target string
}

func (q *queue) log(ctx context.Context, s Step) {
	s.Created = time.Now().UTC()
	q.c.Store.AddStep(ctx, q.r.ID, &s)
	if q.o.Progress != nil {
		q.o.Progress(s)
	}
}

// Rank orders best-of-N branches: CI green first, then those that
// finished red, then more tests passing, then the smaller diff, then fewer interventions, then k.
func Rank(bs []*Branch) []*Branch {
	out := slices.Clone(bs)
	passed := func(b *Branch) int {
		if b.Result == nil {
			return -1
		}
		return b.Result.Passed
	}
	// Passed, then red (finished), then killed or failed.
	finished := func(b *Branch) int {
		switch b.State {
		case Passed:
			return 0
		case Red:
			return 1
		}
		return 2
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case finished(a) != finished(b):
			return finished(a) < finished(b)
		case passed(a) != passed(b):
			return passed(a) > passed(b)
		case a.DiffLines != b.DiffLines:
			return a.DiffLines < b.DiffLines
		case a.Interventions != b.Interventions:
			return a.Interventions < b.Interventions
		}
		return a.K < b.K
	})
	return out
}

func (q *queue) pick(ctx context.Context, bs []*Branch) (string, error) {
	ranked := Rank(bs)
	var b strings.Builder
	b.WriteString("Ranking (CI, tests passed, diff lines, interventions):\n")
	for i, br := range ranked {
		fmt.Fprintf(&b, "%d. branch %d: %s, %s, %d lines, %d interventions\n", i+1, br.K, br.State, resultLine(br.Result), br.DiffLines, br.Interventions)
	}
	q.log(ctx, Step{Kind: "rank", Note: b.String()})
	if len(ranked) == 0 || !ranked[0].Green() || ranked[0].Commit == "" {
		return "", errdefs.New(errdefs.ErrConflict, "no branch passed CI: nothing to merge\n"+b.String())
	}
	w := ranked[0]
	q.target = w.Commit
	if err := q.g.setRef(ctx, "refs/heads/smolvm/"+q.r.ID+"/integration", w.Commit); err != nil {
		return "", err
	}
	q.log(ctx, Step{Kind: "winner", Branch: w.K, Commit: w.Commit, Result: w.Result, Note: "CI: " + resultLine(w.Result)})
	return fmt.Sprintf("Winner: branch %d (%s), CI %s.\n%s", w.K, w.Agent, resultLine(w.Result), b.String()), nil
}

func (q *queue) split(ctx context.Context, bs []*Branch) (string, error) {
	pass := passing(bs)
	m, err := conflicts(ctx, q.g, pass)
	if err != nil {
		return "", err
	}
	// Fewest conflicts first: those merge cleanly onto anything; the
	// contested ones come last, when the rest is in.
	idx := make([]int, len(pass))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return m.Count(idx[a]) < m.Count(idx[b]) })
	var order []string
	for _, i := range idx {
		order = append(order, fmt.Sprint(pass[i].K))
	}
	q.log(ctx, Step{Kind: "rank", Note: fmt.Sprintf("conflict matrix computed for %d passing branches; order %s", len(pass), strings.Join(order, ", "))})
	var merged, ejected []string
	for _, b := range bs {
		if !b.Green() || b.Commit == "" {
			ejected = append(ejected, fmt.Sprintf("branch %d: not merged: %s (%s)", b.K, b.State, b.Reason))
		}
	}
	q.target = q.r.Base
	for _, i := range idx {
		b := pass[i]
		note, err := q.mergeOne(ctx, b)
		if err != nil {
			return "", err
		}
		if note == "" {
			merged = append(merged, fmt.Sprintf("branch %d (%s)", b.K, firstLine(b.Task)))
		} else {
			ejected = append(ejected, fmt.Sprintf("branch %d: ejected: %s", b.K, note))
		}
	}
	if err := q.g.setRef(ctx, "refs/heads/smolvm/"+q.r.ID+"/integration", q.target); err != nil {
		return "", err
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Integration branch smolvm/%s/integration at %s: %d merged, %d not.\n", q.r.ID, short(q.target), len(merged), len(ejected))
	for _, l := range merged {
		s.WriteString("merged: " + l + "\n")
	}
	for _, l := range ejected {
		s.WriteString(l + "\n")
	}
	return s.String(), nil
}

// mergeOne merges b onto the target; "" when it went in, else why it
// was ejected.
func (q *queue) mergeOne(ctx context.Context, b *Branch) (string, error) {
	tree, files, err := q.g.mergeTree(ctx, q.target, b.Commit)
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("smolvm merge queue: branch %d of %s\n\n%s", b.K, q.r.ID, b.Task)
	commit, err := q.g.commit(ctx, tree, msg, q.target, b.Commit)
	if err != nil {
		return "", err
	}
	var failure string
	if len(files) > 0 {
		q.log(ctx, Step{Kind: "conflict", Branch: b.K, Target: q.target, Commit: commit, Files: files,
			Note: "textual conflict in " + strings.Join(files, ", ")})
		failure = "git merge left conflict markers in " + strings.Join(files, ", ")
	} else {
		res, err := q.ci(ctx, commit)
		if err != nil {
			return "", err
		}
		if q.green(res, b) {
			q.log(ctx, Step{Kind: "merged", Branch: b.K, Target: q.target, Commit: commit, Result: &res, Note: "CI after the merge: " + res.Summary()})
			q.target = commit
			return "", nil
		}
		q.log(ctx, Step{Kind: "ci", Branch: b.K, Target: q.target, Commit: commit, Result: &res,
			Note: "semantic conflict: CI red after a clean merge: " + res.Summary()})
		failure = "CI failed after the merge:\n" + res.Failure
	}
	if q.o.Resolver == nil {
		return fmt.Sprintf("%s; no resolver agent", headLine(failure)), nil
	}
	resolved, res, note, err := q.resolve(ctx, b, commit, files, failure)
	if err != nil {
		return "", err
	}
	if resolved == "" {
		q.log(ctx, Step{Kind: "ejected", Branch: b.K, Target: q.target, Result: res, Note: note})
		return note, nil
	}
	q.log(ctx, Step{Kind: "merged", Branch: b.K, Target: q.target, Commit: resolved, Result: res, Note: "resolved by the resolver agent; CI: " + res.Summary()})
	q.target = resolved
	return "", nil
}

// ci runs the run's CI on commit in a fresh fork of the set-up.
func (q *queue) ci(ctx context.Context, commit string) (testparse.Result, error) {
	sb, err := q.fork(ctx, commit)
	if err != nil {
		return testparse.Result{}, err
	}
	defer q.c.Service.Remove(context.WithoutCancel(ctx), sb, true)
	return runner.RunTests(ctx, q.c.Service, sb, q.r.CI.Command, q.o.TestTimeout)
}

// fork restores the set-up checkpoint and makes its repository commit's
// tree.
func (q *queue) fork(ctx context.Context, commit string) (string, error) {
	sb, err := q.c.Service.Restore(ctx, q.r.Snapshot, sandbox.RestoreOptions{})
	if err != nil {
		return "", fmt.Errorf("fork the set-up: %w", err)
	}
	if err := q.g.sync(ctx, q.c.Service, sb.ID, q.r.Base, commit); err != nil {
		q.c.Service.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return "", err
	}
	return sb.ID, nil
}

// green is CI passing once the tests the branches found flaky are set
// aside.
func (q *queue) green(res testparse.Result, b *Branch) bool {
	if res.Green() {
		return true
	}
	if res.Failed == 0 {
		return false
	}
	for _, name := range res.Failing() {
		if !slices.Contains(b.Flaky, name) {
			return false
		}
	}
	return true
}

// resolve hands the merge of b (commit, with conflict markers if files)
// to the resolver agent through the runner, in a fork holding it. The
// returned commit is "" when the resolution did not pass CI.
func (q *queue) resolve(ctx context.Context, b *Branch, commit string, files []string, failure string) (string, *testparse.Result, string, error) {
	agent, name, err := q.o.Resolver()
	if err != nil {
		return "", nil, "", err
	}
	// The runner copies its repository from a work tree: check the
	// merged state out on its own.
	dir, err := os.MkdirTemp("", "smolvm-resolve-")
	if err != nil {
		return "", nil, "", err
	}
	defer os.RemoveAll(dir)
	wt := filepath.Join(dir, "work")
	if _, _, err := git(ctx, "", "clone", "-q", "--shared", "--no-checkout", q.r.Git, wt); err != nil {
		return "", nil, "", err
	}
	if _, _, err := git(ctx, wt, "checkout", "-q", "--detach", commit); err != nil {
		return "", nil, "", err
	}
	ours, _ := q.g.run(ctx, "diff", "--no-ext-diff", "--no-textconv", q.r.Base, q.target)
	theirs, _ := q.g.run(ctx, "diff", "--no-ext-diff", "--no-textconv", q.r.Base, b.Commit)
	task := fmt.Sprintf(`Merge branch %d into the integration branch. The repository holds the merge of both.
%s
Make the merged code do what both sides meant, so that CI (%s) passes. Keep both changes.

Branch %d's task: %s

The integration branch's change (ours):
%s
Branch %d's change (theirs):
%s`, b.K, failure, q.r.CI.Command, b.K, b.Task, capText(ours), b.K, capText(theirs))
	q.log(ctx, Step{Kind: "resolve", Branch: b.K, Target: q.target, Commit: commit, Files: files, Note: "resolver " + name})
	sb, err := q.fork(ctx, commit)
	if err != nil {
		return "", nil, "", err
	}
	budget := q.o.Budget
	if budget.Wall == 0 {
		budget.Wall = 10 * time.Minute
	}
	rctx, cancel := context.WithTimeout(ctx, budget.Wall+Grace)
	defer cancel()
	if ext, ok := agent.(*runner.External); ok && (ext.Timeout == 0 || ext.Timeout > budget.Wall) {
		ext.Timeout = budget.Wall
	}
	rec, err := q.c.Runner.FixIn(rctx, runner.Options{Repo: wt, Test: q.r.CI.Command, Task: task, Agent: agent, AgentName: name,
		Budget: budget, TestTimeout: q.o.TestTimeout, FlakyReruns: -1, RunsDir: q.c.RunsDir}, sb)
	if rec == nil {
		return "", nil, fmt.Sprintf("resolver %s failed: %v", name, err), nil
	}
	why := fmt.Sprintf("the resolver's merge did not pass CI (%s: %s)", rec.State, rec.Reason)
	if err != nil {
		why = fmt.Sprintf("resolver %s failed: %v", name, err)
	}
	if err != nil || rec.State != runner.Resolved || rec.Verdict == nil || !rec.Verdict.Green() {
		return "", rec.Verdict, why + "; " + headLine(failure), nil
	}
	best, err := q.c.Runner.Best(ctx, rec.ID)
	if err != nil {
		return "", nil, "", err
	}
	if err := q.g.fetch(ctx, filepath.Join(q.c.RunsDir, rec.ID, "git"), best.Commit, "refs/smolvm/resolved/"+rec.ID); err != nil {
		return "", nil, "", err
	}
	tree, err := q.g.run(ctx, "rev-parse", best.Commit+"^{tree}")
	if err != nil {
		return "", nil, "", err
	}
	out, err := q.g.commit(ctx, tree, fmt.Sprintf("smolvm merge queue: branch %d of %s, resolved by %s (agent run %s)\n\n%s", b.K, q.r.ID, name, rec.ID, b.Task), q.target, b.Commit)
	return out, rec.Verdict, "", err
}

func resultLine(r *testparse.Result) string {
	if r == nil {
		return "no CI result"
	}
	return r.Summary()
}

func headLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func capText(s string) string {
	const max = 16 << 10
	if len(s) > max {
		return s[:max] + "\n… (truncated)"
	}
	return s
}
