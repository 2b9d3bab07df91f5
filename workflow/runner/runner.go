// Package runner runs a coding agent in a sandbox: it runs the tests,
// hands the failures to the agent, checks its change against the guard,
// checkpoints every iteration, and stops at green or at a budget, keeping
// the best iteration.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/internal/proc"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/runner/testparse"
	"smolvm.dev/smolvm/workflow/trust"
)

// Usage is what the agent spent.
type Usage struct {
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

func (u *Usage) add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CostUSD += v.CostUSD
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int { return u.InputTokens + u.OutputTokens }

// Step is what an agent is given for one iteration.
type Step struct {
	Service sandbox.Service
	Sandbox string // the sandbox to change; the repository is in Dir
	Dir     string
	N       int    // the iteration, from 1
	Task    string // what to do
	// Feedback is what the last iteration showed: the failing tests'
	// output, or why the guard rejected the change (it was rolled back).
	Feedback string
	// Diff returns the change so far against the base commit.
	Diff func(ctx context.Context) (string, error)
	// Check asks the repository's trust policy whether the agent may take
	// action a: an allow returns nil, a deny its reason, an ask waits for
	// an approval (trust.Gate.Check); every call is audited under the
	// requester "agent-RUN".
	Check func(ctx context.Context, a trust.Action) error
}

// Agent changes the repository in a sandbox, one iteration at a time.
type Agent interface {
	Step(ctx context.Context, s Step) (Usage, error)
}

// Budget bounds a run; zero fields take the defaults.
type Budget struct {
	Iterations int           `json:"iterations"`
	Wall       time.Duration `json:"wall"`
	Tokens     int           `json:"tokens"`
	CostUSD    float64       `json:"cost_usd"`
}

// Default budgets and limits.
const (
	DefaultIterations  = 10
	DefaultWall        = 30 * time.Minute
	DefaultTokens      = 2_000_000
	DefaultCostUSD     = 5.0
	DefaultTestTimeout = 10 * time.Minute
	DefaultFlakyReruns = 3
	DefaultStuckAfter  = 3
	MaxIterations      = 1000
)

// Options describe one run.
type Options struct {
	ID        string // the run's ID (NewRunID); empty: a new one
	Repo      string // the user's repository; never written
	Test      string // the test command, run with sh -c in the repository
	Task      string
	Agent     Agent
	AgentName string // for the log
	Budget    Budget
	// TestTimeout bounds one run of the test command.
	TestTimeout time.Duration
	// FlakyReruns is how many copies of the base state re-run the tests
	// to tell a flaky test from a broken one; -1 turns it off.
	FlakyReruns int
	// StuckAfter stops the loop when the same failure comes back that
	// many times in a row without more tests passing.
	StuckAfter int
	// PinParallel bounds the copies that test one reverted hunk each for
	// the evidence (DefaultPinParallel); -1 turns hunk pinning off.
	PinParallel int
	Image       string
	Limits      sandbox.Limits
	// From, if set, is a checkpoint the run's first sandbox is restored
	// from instead of created fresh from Image (with Limits): a warmed
	// build cache, installed tools. The repository is copied into it at
	// Dir, which must not exist there.
	From string
	// Policy classifies and protects test files; nil loads the
	// repository's (trust.Load).
	Policy      *trust.Policy
	AllowWeaken bool
	// RunsDir keeps each run's scratch repository in RunsDir/RUN (for
	// resume and the PR); empty is a temporary directory removed at the
	// end.
	RunsDir string
	// Progress, if set, is told about every phase.
	Progress func(Event)
}

// Event is a progress report.
type Event struct {
	Run       string        `json:"run"`
	Iteration int           `json:"iteration"`
	Phase     string        `json:"phase"` // base, agent, rejected, tests, verdict, done
	Passed    int           `json:"passed"`
	Failed    int           `json:"failed"`
	Flaky     int           `json:"flaky"`
	Tokens    int           `json:"tokens"`
	CostUSD   float64       `json:"cost_usd"`
	Elapsed   time.Duration `json:"elapsed"`
	Note      string        `json:"note,omitempty"`
}

// Runner runs agents on a sandbox service and logs the runs.
type Runner struct {
	Service sandbox.Service
	Log     *Log
	// Ledger audits what agents ask the trust policy (Step.Check) and
	// carries the approvals of its asks.
	Ledger *trust.Ledger
}

type run struct {
	svc    sandbox.Service
	log    *Log
	ledger *trust.Ledger
	o      Options
	id     string
	rec    *Run
	scr    *scratch
	policy *trust.Policy
	start  time.Time
	prior  time.Duration // Elapsed before this session (a resumed run)

	baseSnap   string
	baseResult testparse.Result
	// reruns are each test's statuses in the reruns on the base, for the
	// tests rerun so far; rerunWhole says the whole command was rerun.
	reruns     map[string][]testparse.Status
	rerunWhole bool
	flaky      map[string]bool
	its        []Iteration
}

func (o *Options) defaults() error {
	if o.Test == "" {
		return errdefs.New(errdefs.ErrInvalid, "no test command")
	}
	if o.Agent == nil {
		return errdefs.New(errdefs.ErrInvalid, "no agent")
	}
	b := &o.Budget
	if b.Iterations < 0 || b.Iterations > MaxIterations || b.Wall < 0 || b.Tokens < 0 || b.CostUSD < 0 {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("bad budget %+v (iterations 1 to %d, the rest not negative)", *b, MaxIterations))
	}
	b.Iterations = cmp0(b.Iterations, DefaultIterations)
	b.Wall = cmp0(b.Wall, DefaultWall)
	b.Tokens = cmp0(b.Tokens, DefaultTokens)
	b.CostUSD = cmp0(b.CostUSD, DefaultCostUSD)
	o.TestTimeout = cmp0(o.TestTimeout, DefaultTestTimeout)
	o.FlakyReruns = cmp0(o.FlakyReruns, DefaultFlakyReruns)
	o.StuckAfter = cmp0(o.StuckAfter, DefaultStuckAfter)
	o.PinParallel = min(cmp0(o.PinParallel, DefaultPinParallel), sandbox.MaxFork)
	if o.FlakyReruns > sandbox.MaxFork {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("at most %d flaky reruns", sandbox.MaxFork))
	}
	return nil
}

// check validates o and fills in its defaults.
func (rn *Runner) check(o *Options) error {
	if rn.Ledger == nil {
		return errdefs.New(errdefs.ErrInvalid, "runner: no trust ledger to audit the agent's actions")
	}
	return o.defaults()
}

func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Fix runs the repair loop on a fresh copy of o.Repo.
func (rn *Runner) Fix(ctx context.Context, o Options) (*Run, error) {
	return rn.fix(ctx, o, "")
}

// FixIn is Fix in a sandbox the caller made ready (workflow/branch forks
// one set-up checkpoint into many): sb runs, and its Dir holds o.Repo's
// committed tree plus whatever the set-up left beside it. The run owns sb
// and removes it at the end. Unlike Fix, a task on a green base is work
// to do (a feature, a sub-task), not nothing to fix: the agent gets one
// turn before the loop judges it.
func (rn *Runner) FixIn(ctx context.Context, o Options, sb string) (*Run, error) {
	if sb == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "FixIn: no sandbox")
	}
	return rn.fix(ctx, o, sb)
}

// fix is Fix (sb == "": the run makes its own sandbox) or FixIn.
func (rn *Runner) fix(ctx context.Context, o Options, sb string) (*Run, error) {
	r := &run{svc: rn.Service, log: rn.Log, ledger: rn.Ledger, o: o, id: cmp0(o.ID, NewRunID()), start: time.Now(), flaky: map[string]bool{}}
	if err := rn.check(&r.o); err != nil {
		r.remove(ctx, sb)
		return nil, err
	}
	o = r.o
	if err := r.open(ctx, ""); err != nil {
		r.remove(ctx, sb)
		return nil, err
	}
	defer r.closeScratch()
	r.rec = &Run{ID: r.id, Created: r.start.UTC(), Repo: r.scr.repo, Task: o.Task, Test: o.Test,
		Agent: o.AgentName, Base: r.scr.base, State: Running, Owner: proc.Self()}
	if err := r.log.Save(ctx, r.rec); err != nil {
		r.remove(ctx, sb)
		return nil, err
	}
	given := sb != ""
	if !given {
		var err error
		if sb, err = r.newBox(ctx, ""); err != nil {
			return r.fail(ctx, err)
		}
	}
	defer func() { r.remove(ctx, sb) }()
	base, err := r.runTests(ctx, sb)
	if err != nil {
		return r.fail(ctx, err)
	}
	r.baseResult = base
	if r.baseSnap, err = r.snapshot(ctx, sb, 0); err != nil {
		return r.fail(ctx, err)
	}
	r.rec.BaseSnapshot = r.baseSnap
	it := Iteration{N: 0, Created: time.Now().UTC(), Commit: r.scr.base, Snapshot: r.baseSnap, Result: &base, Note: "base"}
	if !base.Green() && o.FlakyReruns > 0 {
		if err := r.classify(ctx, base.Failing()); err != nil {
			return r.fail(ctx, err)
		}
		it.Flaky = r.flakyOf(base)
	}
	r.its = append(r.its, it)
	if err := r.log.Add(ctx, r.id, it); err != nil {
		return r.fail(ctx, err)
	}
	r.emit(0, "base", &base, "")
	if !given || !r.green(base) {
		return r.loop(ctx, &sb, 0)
	}
	return r.firstTurn(ctx, &sb, it)
}

// Resume continues run id from iteration from's checkpoint, with o's
// agent and budget (the budget counts from now).
func (rn *Runner) Resume(ctx context.Context, id string, from int, o Options) (*Run, error) {
	rec, err := rn.Log.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	its, err := rn.Log.Iterations(ctx, id)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(its, func(it Iteration) bool { return it.N == from })
	if i < 0 || its[i].Snapshot == "" {
		return nil, errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("run %s has no checkpoint at iteration %d", id, from))
	}
	o.Repo, o.Test = rec.Repo, cmp0(o.Test, rec.Test)
	o.Task = cmp0(o.Task, rec.Task)
	if err := rn.check(&o); err != nil {
		return nil, err
	}
	r := &run{svc: rn.Service, log: rn.Log, ledger: rn.Ledger, o: o, id: id, rec: rec, its: its, start: time.Now(),
		flaky: map[string]bool{}, baseSnap: rec.BaseSnapshot, prior: rec.Elapsed}
	for _, f := range rec.Flaky {
		r.flaky[f] = true
	}
	if its[0].Result != nil {
		r.baseResult = *its[0].Result
	}
	if err := r.open(ctx, rec.Base); err != nil {
		return nil, err
	}
	defer r.closeScratch()
	rec.State, rec.Reason, rec.Verdict, rec.Evidence, rec.Owner = Running, "", nil, nil, proc.Self()
	sb, err := r.restore(ctx, its[i].Snapshot)
	if err != nil {
		return r.fail(ctx, err)
	}
	defer func() { r.remove(ctx, sb) }()
	return r.loop(ctx, &sb, from)
}

// open makes or reopens the scratch repository. A resumed run reopens
// the one in WorkDir, whose base commit is base.
func (r *run) open(ctx context.Context, base string) error {
	var err error
	if r.o.Policy == nil {
		if r.o.Policy, err = trust.Load(r.o.Repo); err != nil {
			return fmt.Errorf("policy of %s: %w", r.o.Repo, err)
		}
	}
	r.policy = r.o.Policy
	if base != "" {
		if r.o.RunsDir == "" {
			return errdefs.New(errdefs.ErrInvalid, "resume needs the runs dir")
		}
		r.scr, err = openScratch(filepath.Join(r.o.RunsDir, r.id), r.o.Repo, base)
		return err
	}
	dir := ""
	if r.o.RunsDir != "" {
		dir = filepath.Join(r.o.RunsDir, r.id)
	}
	r.scr, err = newScratch(ctx, r.o.Repo, dir)
	return err
}

func (r *run) closeScratch() {
	if r.o.RunsDir == "" {
		r.scr.close()
	}
}

func (r *run) fail(ctx context.Context, err error) (*Run, error) {
	r.rec.State, r.rec.Reason = Failed, err.Error()
	if ctx.Err() != nil {
		// Cancelled before anything was checkpointed.
		r.rec.State, r.rec.Reason = Stopped, "stopped: cancelled ("+err.Error()+")"
	}
	r.rec.Elapsed = r.elapsed()
	r.log.Save(context.WithoutCancel(ctx), r.rec)
	r.emit(r.rec.Best, "done", nil, string(r.rec.State)+": "+r.rec.Reason)
	return r.rec, err
}

// loop iterates from iteration from (whose state *sb holds) until green,
// stuck or out of budget, then gives the verdict on the best iteration.
func (r *run) loop(ctx context.Context, sb *string, from int) (*Run, error) {
	cur := r.find(from)
	feedback := r.feedback(cur)
	var usage Usage
	stuck, lastKey := 0, ""
	reason := ""
	first := r.its[len(r.its)-1].N + 1
	for n := first; ; n++ {
		if cur.Result != nil && r.green(*cur.Result) {
			reason = "green"
			if cur.N == 0 {
				reason = "green at the start: nothing to fix"
			}
			break
		}
		if reason = r.exhausted(n-first, usage); reason != "" {
			break
		}
		if err := ctx.Err(); err != nil {
			reason = "cancelled"
			break
		}
		r.emit(n, "agent", nil, "")
		u, err := r.o.Agent.Step(ctx, Step{
			Service: r.svc, Sandbox: *sb, Dir: Dir, N: n, Task: r.o.Task, Feedback: feedback,
			Diff:  func(ctx context.Context) (string, error) { return r.diffOf(ctx, *sb, cur.Commit, n) },
			Check: r.check,
		})
		usage.add(u)
		r.rec.Usage.add(u)
		if err != nil {
			if ctx.Err() != nil {
				reason = "cancelled"
			} else {
				reason = fmt.Sprintf("agent: %v", err)
			}
			break
		}
		it, err := r.iterate(ctx, sb, cur, n, u)
		if err != nil {
			if ctx.Err() != nil {
				reason = "cancelled"
				break
			}
			return r.fail(ctx, err)
		}
		r.its = append(r.its, it)
		if err := r.log.Add(ctx, r.id, it); err != nil {
			return r.fail(ctx, err)
		}
		r.rec.Flaky = r.flakyList()
		r.log.Save(ctx, r.rec)
		key := ""
		if it.Result == nil {
			r.emit(n, "rejected", nil, fmt.Sprintf("%d violation(s)", len(it.Violations)))
			feedback = guard.Feedback(it.Violations)
			key = feedback
		} else {
			r.emit(n, "tests", it.Result, "")
			// Digits (durations, addresses, line numbers) vary between
			// runs of the same failure.
			key = strings.Join(r.realFailing(*it.Result), "\n") + "\x00" + digits().ReplaceAllString(it.Result.Failure, "0")
			if it.Passed() > cur.Passed() {
				stuck, lastKey = 0, "" // progress, whatever the failure says
			}
			cur = it
			feedback = r.feedback(it)
		}
		if key == lastKey {
			stuck++
		} else {
			stuck, lastKey = 1, key
		}
		if stuck >= r.o.StuckAfter {
			reason = fmt.Sprintf("stuck: the same failure %d times in a row", stuck)
			if cur.Result != nil && r.green(*cur.Result) {
				reason = "green"
			}
			break
		}
	}
	return r.finish(ctx, reason)
}

var digits = lazyre.New(`[0-9]+`)

// iterate judges the agent's change in *sb: the guard first, then the
// tests, then a checkpoint. A rejected change is rolled back by
// restoring cur's checkpoint into a new sandbox.
func (r *run) iterate(ctx context.Context, sb *string, cur Iteration, n int, u Usage) (Iteration, error) {
	it := Iteration{N: n, Created: time.Now().UTC(), Parent: cur.N, Usage: u}
	commit, err := r.candidate(ctx, *sb, cur.Commit, n)
	if err != nil {
		return it, err
	}
	if it.Diff, err = r.scr.diff(ctx, r.scr.base, commit); err != nil {
		return it, err
	}
	if vs := guard.Check(it.Diff, guard.Options{Policy: r.policy, AllowWeaken: r.o.AllowWeaken}); len(vs) > 0 {
		return it, r.reject(ctx, sb, cur, &it, vs)
	}
	// The agent's test files run on the base code beside the change's
	// own test run: each in its sandbox.
	checked := make(chan error, 1)
	go func() {
		var err error
		it.Tests, err = r.testsOnBase(ctx, commit)
		checked <- err
	}()
	res, err := r.runTests(ctx, *sb)
	if cerr := <-checked; err == nil {
		err = cerr
	}
	if err != nil {
		return it, err
	}
	if it.Tests != nil && !r.o.AllowWeaken && len(it.Tests.Weakened) > 0 {
		return it, r.reject(ctx, sb, cur, &it, it.Tests.violations())
	}
	it.Commit = commit
	if err := r.classify(ctx, r.newFailures(res)); err != nil {
		return it, err
	}
	it.Result, it.Flaky = &res, r.flakyOf(res)
	if it.Snapshot, err = r.snapshot(ctx, *sb, n); err != nil {
		return it, err
	}
	return it, nil
}

// reject refuses it (violations vs) and rolls *sb back by restoring
// cur's checkpoint into a new sandbox.
func (r *run) reject(ctx context.Context, sb *string, cur Iteration, it *Iteration, vs []guard.Violation) error {
	it.Violations = vs
	it.Note = "rejected: rolled back to iteration " + fmt.Sprint(cur.N)
	old := *sb
	*sb = ""
	r.remove(ctx, old)
	var err error
	*sb, err = r.restore(ctx, cur.Snapshot)
	return err
}

// finish re-runs the best iteration's tests against the pristine test
// files of the base commit and records the verdict.
func (r *run) finish(ctx context.Context, reason string) (*Run, error) {
	best := r.best()
	r.rec.Best = best.N
	if ctx.Err() != nil {
		// Stopped: the best checkpoint stands without a verdict, which
		// would run the tests again.
		r.rec.Flaky = r.flakyList()
		r.rec.State, r.rec.Reason = Stopped, "stopped: "+reason
		r.rec.Elapsed = r.elapsed()
		if err := r.log.Save(context.WithoutCancel(ctx), r.rec); err != nil {
			return r.rec, err
		}
		r.emit(best.N, "done", best.Result, string(r.rec.State)+": "+reason)
		return r.rec, nil
	}
	sb, err := r.restore(ctx, best.Snapshot)
	if err != nil {
		return r.fail(ctx, err)
	}
	defer r.remove(ctx, sb)
	if err := r.pristine(ctx, sb, best.Commit); err != nil {
		return r.fail(ctx, err)
	}
	test, env, err := r.verdictCommand(ctx, sb, best)
	if err != nil {
		return r.fail(ctx, err)
	}
	v, err := r.runEnv(ctx, sb, test, env)
	if err != nil {
		return r.fail(ctx, err)
	}
	r.rec.Verdict = &v
	r.emit(best.N, "verdict", &v, reason)
	r.rec.Flaky = r.flakyList()
	r.rec.State, r.rec.Reason = Stopped, reason
	if r.green(v) && best.N > 0 {
		r.rec.State = Resolved
	}
	if r.rec.Evidence, err = r.evidence(ctx, sb, best, v, r.collectCoverage(ctx, sb, best.Commit)); err != nil {
		return r.fail(ctx, fmt.Errorf("review evidence: %w", err))
	}
	r.rec.Elapsed = r.elapsed()
	if err := r.log.Save(context.WithoutCancel(ctx), r.rec); err != nil {
		return r.rec, err
	}
	r.emit(best.N, "done", &v, string(r.rec.State)+": "+reason+"; evidence: "+r.rec.Evidence.Verdict)
	return r.rec, nil
}

// best is the accepted iteration with the most tests passing; among
// equals, the one with fewest real failures, then the latest.
func (r *run) best() Iteration {
	var best Iteration
	have := false
	for _, it := range r.its {
		if it.Result == nil || it.Snapshot == "" {
			continue
		}
		if !have || it.Passed() > best.Passed() ||
			it.Passed() == best.Passed() && len(r.realFailing(*it.Result)) <= len(r.realFailing(*best.Result)) {
			best, have = it, true
		}
	}
	return best
}

func (r *run) find(n int) Iteration {
	for _, it := range r.its {
		if it.N == n {
			return it
		}
	}
	return r.its[0]
}

func (r *run) exhausted(done int, u Usage) string {
	b := r.o.Budget
	switch {
	case done >= b.Iterations:
		return fmt.Sprintf("budget: %d iterations", b.Iterations)
	case time.Since(r.start) >= b.Wall:
		return fmt.Sprintf("budget: %s wall time", b.Wall)
	case u.Tokens() >= b.Tokens:
		return fmt.Sprintf("budget: %d tokens", b.Tokens)
	case u.CostUSD >= b.CostUSD:
		return fmt.Sprintf("budget: $%.2f", b.CostUSD)
	}
	return ""
}

// green is a passing run once flaky tests are set aside.
func (r *run) green(res testparse.Result) bool {
	if res.Green() {
		return true
	}
	return res.Failed > 0 && len(r.realFailing(res)) == 0
}

func (r *run) realFailing(res testparse.Result) []string {
	var out []string
	for _, name := range res.Failing() {
		if !r.flaky[name] {
			out = append(out, name)
		}
	}
	return out
}

// newFailures are the failing tests that passed (or did not run) on the
// base: either the change broke them or they are flaky.
func (r *run) newFailures(res testparse.Result) []string {
	var out []string
	for _, name := range res.Failing() {
		if !r.flaky[name] && r.baseResult.Status(name) != testparse.Fail {
			out = append(out, name)
		}
	}
	return out
}

// classify marks as flaky those of names that, re-run on copies of the
// base state, do not fail consistently the way the base run said: a
// test failing on base that passes in a rerun flips; a test that passed
// on base (a new failure) and fails in a rerun fails on base regardless
// of the change. Each test is rerun once, the copies in parallel, and
// only the tests not yet rerun: the command is narrowed to them where the
// test runner selects by name (narrow), else it runs whole, once.
func (r *run) classify(ctx context.Context, names []string) error {
	if len(names) == 0 || r.o.FlakyReruns <= 0 {
		return nil
	}
	if r.reruns == nil {
		r.reruns = map[string][]testparse.Status{}
	}
	var todo []string
	for _, name := range names {
		if _, done := r.reruns[name]; !done && !r.rerunWhole {
			todo = append(todo, name)
		}
	}
	if len(todo) > 0 {
		cmd, ok := narrow(r.o.Test, r.baseResult.Format, todo)
		if !ok {
			cmd = r.o.Test
		}
		res, err := r.rerunBase(ctx, r.o.FlakyReruns, cmd)
		if err != nil {
			return err
		}
		r.rerunWhole = !ok
		for _, rr := range res {
			for _, name := range todo {
				r.reruns[name] = append(r.reruns[name], rr.Status(name))
			}
			if !ok { // the whole command ran: every test's rerun is known
				for _, t := range rr.Tests {
					if !slices.Contains(todo, t.Name) {
						r.reruns[t.Name] = append(r.reruns[t.Name], t.Status)
					}
				}
			}
		}
	}
	for _, name := range names {
		was := r.baseResult.Status(name)
		for _, s := range r.reruns[name] {
			if was == testparse.Fail && s == testparse.Pass || was != testparse.Fail && s == testparse.Fail {
				r.flaky[name] = true
			}
		}
	}
	return nil
}

func (r *run) flakyOf(res testparse.Result) []string {
	var out []string
	for _, name := range res.Failing() {
		if r.flaky[name] {
			out = append(out, name)
		}
	}
	return out
}

func (r *run) flakyList() []string {
	var out []string
	for name := range r.flaky {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// feedback tells the agent what the tests of it said, flaky tests aside.
func (r *run) feedback(it Iteration) string {
	if it.Result == nil {
		return ""
	}
	res := *it.Result
	var b strings.Builder
	fmt.Fprintf(&b, "Test command: %s\nResult: %s\n", r.o.Test, res.Summary())
	if fl := r.flakyOf(res); len(fl) > 0 {
		fmt.Fprintf(&b, "Flaky (they fail on the unchanged code too; ignore them): %s\n", strings.Join(fl, ", "))
	}
	real := r.realFailing(res)
	if len(real) == 0 && !res.Green() && res.Failed == 0 {
		b.WriteString(res.Failure)
		return b.String()
	}
	for _, t := range res.Tests {
		if t.Status == testparse.Fail && slices.Contains(real, t.Name) {
			fmt.Fprintf(&b, "\n--- FAIL: %s\n%s\n", t.Name, strings.TrimRight(t.Output, "\n"))
		}
	}
	return b.String()
}

// check is Step.Check: the policy's verdict on an action of the agent,
// audited in the ledger.
func (r *run) check(ctx context.Context, a trust.Action) error {
	g := &trust.Gate{Policy: r.policy, Ledger: r.ledger}
	return g.Check(ctx, a, "agent-"+r.id)
}

// diffOf is the agent's view_diff: the sandbox's tree against the base.
func (r *run) diffOf(ctx context.Context, sb, parent string, n int) (string, error) {
	c, err := r.candidate(ctx, sb, parent, n)
	if err != nil {
		return "", err
	}
	return r.scr.diff(ctx, r.scr.base, c)
}

// elapsed is the run's time so far: this session's, plus what the run
// took before a resume.
func (r *run) elapsed() time.Duration { return r.prior + time.Since(r.start) }

func (r *run) emit(n int, phase string, res *testparse.Result, note string) {
	if r.o.Progress == nil {
		return
	}
	e := Event{Run: r.id, Iteration: n, Phase: phase, Tokens: r.rec.Usage.Tokens(), CostUSD: r.rec.Usage.CostUSD,
		Elapsed: r.elapsed(), Note: note}
	if res != nil {
		e.Passed, e.Failed, e.Flaky = res.Passed, len(r.realFailing(*res)), len(r.flakyOf(*res))
	}
	r.o.Progress(e)
}

// Best returns the commit of a run's best iteration in its work dir's
// scratch repository.
func (rn *Runner) Best(ctx context.Context, id string) (Iteration, error) {
	rec, err := rn.Log.Get(ctx, id)
	if err != nil {
		return Iteration{}, err
	}
	its, err := rn.Log.Iterations(ctx, id)
	if err != nil {
		return Iteration{}, err
	}
	for _, it := range its {
		if it.N == rec.Best {
			return it, nil
		}
	}
	return Iteration{}, errors.New("run has no best iteration")
}

// openScratch reopens a kept scratch repository.
func openScratch(dir, repo, base string) (*scratch, error) {
	s := &scratch{dir: dir, git: filepath.Join(dir, "git"), tree: filepath.Join(dir, "base"), repo: repo, base: base}
	if _, err := os.Stat(s.git); err != nil {
		return nil, fmt.Errorf("the run's work dir: %w", err)
	}
	return s, nil
}

// Verify re-runs run id's best iteration on the base commit's pristine
// test files with extra files written over them (an evaluation's hidden
// tests), and returns what the tests say.
func (rn *Runner) Verify(ctx context.Context, runsDir, id string, extra map[string][]byte, o Options) (testparse.Result, error) {
	rec, err := rn.Log.Get(ctx, id)
	if err != nil {
		return testparse.Result{}, err
	}
	best, err := rn.Best(ctx, id)
	if err != nil {
		return testparse.Result{}, err
	}
	o.Repo, o.Test, o.RunsDir = rec.Repo, cmp0(o.Test, rec.Test), runsDir
	o.TestTimeout = cmp0(o.TestTimeout, DefaultTestTimeout)
	r := &run{svc: rn.Service, log: rn.Log, o: o, id: id, rec: rec}
	if err := r.open(ctx, rec.Base); err != nil {
		return testparse.Result{}, err
	}
	sb, err := r.restore(ctx, best.Snapshot)
	if err != nil {
		return testparse.Result{}, err
	}
	defer r.remove(ctx, sb)
	if err := r.pristine(ctx, sb, best.Commit); err != nil {
		return testparse.Result{}, err
	}
	for name, data := range extra {
		if err := r.svc.WriteFile(ctx, sb, path.Join(Dir, filepath.ToSlash(name)), bytes.NewReader(data)); err != nil {
			return testparse.Result{}, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return r.runTests(ctx, sb)
}
