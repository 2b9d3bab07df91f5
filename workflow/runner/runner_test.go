package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/trust"
)

// A repository whose tests run under node --test (TAP): two functions,
// both wrong, and a test that fails only the first time it runs in a
// sandbox (flaky).
var jsRepo = map[string]string{
	"calc.js": "exports.add = (a, b) => a - b;\nexports.mul = (a, b) => a + b;\n",
	"calc.test.js": `const test = require('node:test');
const assert = require('node:assert');
const { add, mul } = require('./calc.js');
test('add', () => { assert.strictEqual(add(2, 3), 5); });
test('mul', () => { assert.strictEqual(mul(2, 3), 6); });
test('zero', () => { assert.strictEqual(add(0, 0), 0); });
`,
}

const jsTest = "node --test --test-reporter=tap"

func flakyRepo() map[string]string {
	m := map[string]string{}
	for k, v := range jsRepo {
		m[k] = v
	}
	// Fails on the first run in a sandbox, passes on every later one: on
	// copies of the base checkpoint (taken after the first run) it passes.
	m["flaky.test.js"] = `const test = require('node:test');
const fs = require('node:fs');
test('flaky', () => {
  if (!fs.existsSync('/tmp/ran-once')) { fs.writeFileSync('/tmp/ran-once', ''); throw new Error('timing out talking to the network'); }
});
`
	return m
}

func gitRepo(t *testing.T, files map[string]string) string { return testenv.GitRepo(t, files) }

// script is an agent whose steps are Go functions; it records the
// feedback each step was given.
type script struct {
	mu       sync.Mutex
	steps    []func(ctx context.Context, s Step) error
	feedback []string
}

func (a *script) Step(ctx context.Context, s Step) (Usage, error) {
	a.mu.Lock()
	a.feedback = append(a.feedback, s.Feedback)
	i := len(a.feedback) - 1
	a.mu.Unlock()
	if i >= len(a.steps) {
		return Usage{InputTokens: 10}, nil // does nothing
	}
	return Usage{InputTokens: 100, OutputTokens: 20, CostUSD: 0.01}, a.steps[i](ctx, s)
}

func write(name, data string) func(ctx context.Context, s Step) error {
	return func(ctx context.Context, s Step) error {
		return s.Service.WriteFile(ctx, s.Sandbox, s.Dir+"/"+name, strings.NewReader(data))
	}
}

func read(ctx context.Context, s Step, name string) (string, error) {
	rc, err := s.Service.ReadFile(ctx, s.Sandbox, s.Dir+"/"+name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func newRunner(t testing.TB) *Runner {
	t.Helper()
	env := testmgr.New(t)
	log, err := OpenLog(context.Background(), env.Store)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := trust.OpenLedger(context.Background(), env.Store)
	if err != nil {
		t.Fatal(err)
	}
	return &Runner{Service: env.Manager, Log: log, Ledger: ledger}
}

func fix(t *testing.T, rn *Runner, repo string, agent Agent, mod func(*Options)) *Run {
	t.Helper()
	run, _ := fixEvents(t, rn, repo, agent, mod)
	return run
}

// fixEvents is fix that returns the progress events too.
func fixEvents(t *testing.T, rn *Runner, repo string, agent Agent, mod func(*Options)) (*Run, []Event) {
	t.Helper()
	o := Options{Repo: repo, Test: jsTest, Task: "make the tests pass", Agent: agent, AgentName: "script",
		RunsDir: t.TempDir(), FlakyReruns: 2, Budget: Budget{Iterations: 4}}
	if mod != nil {
		mod(&o)
	}
	var events []Event
	o.Progress = func(e Event) { events = append(events, e) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := rn.Fix(ctx, o)
	if err != nil {
		t.Fatalf("fix: %v", err)
	}
	if len(events) == 0 || events[len(events)-1].Phase != "done" {
		t.Errorf("events = %+v", events)
	}
	return run, events
}

const fixedCalc = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b;\n"

func TestFixSucceedsWithRejectedCheat(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	before, _ := os.ReadFile(filepath.Join(repo, "calc.js"))
	agent := &script{steps: []func(context.Context, Step) error{
		// The tempting move: delete the failing tests.
		write("calc.test.js", "const test = require('node:test');\ntest('zero', () => {});\n"),
		// After the rollback the test file is the original again.
		func(ctx context.Context, s Step) error {
			got, err := read(ctx, s, "calc.test.js")
			if err != nil {
				return err
			}
			if got != jsRepo["calc.test.js"] {
				return fmt.Errorf("not rolled back: %q", got)
			}
			return write("calc.js", fixedCalc)(ctx, s)
		},
	}}
	run := fix(t, rn, repo, agent, nil)
	if run.State != Resolved || run.Verdict == nil || !run.Verdict.Green() || run.Best != 2 {
		t.Fatalf("run = %+v", run)
	}
	if !strings.Contains(agent.feedback[0], "--- FAIL: add") || !strings.Contains(agent.feedback[0], "5") {
		t.Errorf("first feedback lacks the failure:\n%s", agent.feedback[0])
	}
	if !strings.Contains(agent.feedback[1], "rejected") || !strings.Contains(agent.feedback[1], "test add was removed") {
		t.Errorf("the rejection was not fed back:\n%s", agent.feedback[1])
	}
	its, err := rn.Log.Iterations(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(its) != 3 || its[1].Result != nil || len(its[1].Violations) == 0 || its[2].Snapshot == "" ||
		!strings.Contains(its[2].Diff, "+exports.add = (a, b) => a + b;") {
		t.Fatalf("iterations = %+v", its)
	}
	rules := []guard.Rule{}
	for _, v := range its[1].Violations {
		rules = append(rules, v.Rule)
	}
	if !slices.Contains(rules, guard.Protected) || !slices.Contains(rules, guard.RemovedTest) {
		t.Errorf("violations = %v", its[1].Violations)
	}
	if after, _ := os.ReadFile(filepath.Join(repo, "calc.js")); !bytes.Equal(before, after) {
		t.Error("the user's tree was written")
	}
}

func TestFlakyNotChased(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, flakyRepo())
	agent := &script{steps: []func(context.Context, Step) error{write("calc.js", fixedCalc)}}
	run := fix(t, rn, repo, agent, nil)
	if !slices.Equal(run.Flaky, []string{"flaky"}) {
		t.Fatalf("flaky = %q", run.Flaky)
	}
	if strings.Contains(agent.feedback[0], "--- FAIL: flaky") || !strings.Contains(agent.feedback[0], "Flaky") {
		t.Errorf("the flaky test drove the loop:\n%s", agent.feedback[0])
	}
	if run.State != Resolved {
		t.Fatalf("run = %+v", run)
	}
}

func TestBudgetKeepsBestThenResume(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	work := t.TempDir()
	agent := &script{steps: []func(context.Context, Step) error{
		write("calc.js", "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a + b;\n"), // add fixed: 2 pass
		write("calc.js", "exports.add = (a, b) => a * b;\nexports.mul = (a, b) => a + b;\n"), // worse: 0 pass
	}}
	run := fix(t, rn, repo, agent, func(o *Options) { o.Budget.Iterations = 2; o.RunsDir = work })
	if run.State != Stopped || run.Best != 1 || run.Verdict == nil || run.Verdict.Passed != 2 || !strings.HasPrefix(run.Reason, "budget") {
		t.Fatalf("run = %+v verdict %+v", run, run.Verdict)
	}
	// Resume from the best checkpoint: the file there is iteration 1's.
	next := &script{steps: []func(context.Context, Step) error{func(ctx context.Context, s Step) error {
		got, err := read(ctx, s, "calc.js")
		if err != nil {
			return err
		}
		if !strings.Contains(got, "a + b;\nexports.mul = (a, b) => a + b") {
			return fmt.Errorf("resumed from the wrong state: %q", got)
		}
		return write("calc.js", fixedCalc)(ctx, s)
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := rn.Resume(ctx, run.ID, 1, Options{Agent: next, RunsDir: work, FlakyReruns: 2})
	if err != nil {
		t.Fatal(err)
	}
	its, _ := rn.Log.Iterations(ctx, run.ID)
	if run.State != Resolved || run.Best != 3 || len(its) != 4 || its[3].Parent != 1 {
		t.Fatalf("resumed run = %+v, iterations %d", run, len(its))
	}
}

func TestStuck(t *testing.T) {
	rn := newRunner(t)
	run := fix(t, rn, gitRepo(t, jsRepo), &script{}, func(o *Options) { o.Budget.Iterations = 10; o.FlakyReruns = -1 })
	if run.State != Stopped || !strings.HasPrefix(run.Reason, "stuck") {
		t.Fatalf("run = %+v", run)
	}
	its, _ := rn.Log.Iterations(context.Background(), run.ID)
	if len(its) != 1+DefaultStuckAfter {
		t.Fatalf("%d iterations before stopping", len(its))
	}
}

// TestEditWithinTheSecond: the agent's fix keeps calc.py's size and its
// mtime second, as a quick edit of "a - b" to "a + b" does. A .pyc cached
// by the test run before would pass for current, and the fix would be
// tested as the old code (the eval's py-add once got "stuck" so).
func TestEditWithinTheSecond(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, map[string]string{
		"calc.py":      "def add(a, b):\n    return a - b\n",
		"test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
	})
	edit := func(ctx context.Context, s Step) error {
		script := `t=$(stat -c %Y calc.py) && printf 'def add(a, b):\n    return a + b\n' > calc.py && touch -d @$t calc.py`
		exit, err := s.Service.Exec(ctx, s.Sandbox, sandbox.Process{Args: []string{"sh", "-c", script}, Dir: s.Dir}, sandbox.Stdio{})
		if err == nil && exit.Code != 0 {
			err = fmt.Errorf("edit: exit %d", exit.Code)
		}
		return err
	}
	run := fix(t, rn, repo, &script{steps: []func(context.Context, Step) error{edit}}, func(o *Options) {
		o.Test = "python3 -m pytest -rA -p no:cacheprovider"
	})
	if run.State != Resolved || run.Best != 1 {
		t.Fatalf("run = %+v, want resolved by iteration 1", run)
	}
}

// testsWritable lets the agent write test files, so only the checks of
// the change itself stand between a weakened test and a green run.
func testsWritable(t *testing.T, repo string) *trust.Policy {
	t.Helper()
	p, err := trust.Parse(repo, "policy.toml", []byte("default = \"allow\"\n[tests]\nallow = [\"**\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// weaken rewrites calc.test.js's assertion on add (and mul's, if given).
func weaken(add, mul string) func(ctx context.Context, s Step) error {
	src := strings.Replace(jsRepo["calc.test.js"], "assert.strictEqual(add(2, 3), 5)", add, 1)
	if mul != "" {
		src = strings.Replace(src, "assert.strictEqual(mul(2, 3), 6)", mul, 1)
	}
	return write("calc.test.js", src)
}

// TestWeakenedOnBase: with test files writable, node:assert rewrites
// that no pattern of the guard knows are refused because the agent's test
// file passes on the base code where the pristine one failed. Then a real
// fix with an added test that passes on the base already: resolved,
// proven, the added test reported as proving nothing. The verdict line
// shows the pristine verdict, and done's elapsed is the run's.
func TestWeakenedOnBase(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	agent := &script{steps: []func(context.Context, Step) error{
		weaken("assert.ok(true)", "assert(true)"),
		weaken("assert.ok(add(2, 3))", ""),
		func(ctx context.Context, s Step) error {
			if got, err := read(ctx, s, "calc.test.js"); err != nil || got != jsRepo["calc.test.js"] {
				return fmt.Errorf("not rolled back: %q %v", got, err)
			}
			if err := write("extra.test.js", "const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc.js');\ntest('extra zero', () => { assert.strictEqual(add(1, 0), 1); });\n")(ctx, s); err != nil {
				return err
			}
			return write("calc.js", fixedCalc)(ctx, s)
		},
	}}
	run, events := fixEvents(t, rn, repo, agent, func(o *Options) { o.Policy = testsWritable(t, repo) })
	if run.State != Resolved || run.Best != 3 {
		t.Fatalf("run = %+v", run)
	}
	its, err := rn.Log.Iterations(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		it := its[n]
		if it.Result != nil || len(it.Violations) == 0 || it.Violations[0].Rule != guard.PassesOnBase || it.Tests == nil {
			t.Fatalf("iteration %d accepted: %+v", n, it)
		}
	}
	if w := its[1].Tests.Weakened; !slices.Equal(w, []string{"add", "mul"}) {
		t.Errorf("iteration 1 weakened %q, want add, mul", w)
	}
	if !strings.Contains(agent.feedback[1], "passes-on-base") || !strings.Contains(agent.feedback[1], "test add fails on the unchanged code") {
		t.Errorf("the refusal was not fed back:\n%s", agent.feedback[1])
	}
	if c := its[3].Tests; c == nil || len(c.Weakened) != 0 || !slices.Equal(c.ProveNothing, []string{"extra zero"}) {
		t.Errorf("iteration 3's test check: %+v", c)
	}

	var verdict, done *Event
	for i := range events {
		switch events[i].Phase {
		case "verdict":
			verdict = &events[i]
		case "done":
			done = &events[i]
		}
	}
	// The best iteration ran 4 tests (extra zero too); the pristine
	// verdict runs the base's 3.
	if verdict == nil || verdict.Passed != run.Verdict.Passed || verdict.Passed != 3 {
		t.Errorf("verdict event %+v, pristine verdict %s", verdict, run.Verdict.Summary())
	}
	if d := done.Elapsed - run.Elapsed; d < -time.Second || d > time.Second {
		t.Errorf("done says %s elapsed, the run %s", done.Elapsed, run.Elapsed)
	}

	e := run.Evidence
	if e == nil || e.Verdict != Proven || !slices.Equal(e.FailToPass, []string{"add", "mul"}) || !slices.Equal(e.PassToPass, []string{"zero"}) ||
		!slices.Equal(e.ProveNothing, []string{"extra zero"}) {
		t.Fatalf("evidence = %+v", e)
	}
	if len(e.Hunks) != 2 || e.Hunks[0].File != "calc.js" || !e.Hunks[0].Pinned || !slices.Equal(e.Hunks[0].By, []string{"add", "mul"}) ||
		e.Hunks[1].File != "extra.test.js" || !e.Hunks[1].Test || e.Hunks[1].Pinned {
		t.Errorf("hunks = %+v", e.Hunks)
	}
	if c := e.Coverage; c.Tool != "node-v8" || c.Changed != 2 || c.Executed != 2 {
		t.Errorf("coverage = %+v", c)
	}
}

// TestEvidenceNeedsReview: a fix plus a hunk no test needs (a function
// in a file no test loads) resolves, but needs review, naming the hunk;
// its line is not executed.
func TestEvidenceNeedsReview(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	agent := &script{steps: []func(context.Context, Step) error{func(ctx context.Context, s Step) error {
		if err := write("util.js", "exports.unused = () => 42;\n")(ctx, s); err != nil {
			return err
		}
		return write("calc.js", fixedCalc)(ctx, s)
	}}}
	run := fix(t, rn, repo, agent, func(o *Options) { o.FlakyReruns = -1 })
	e := run.Evidence
	if run.State != Resolved || e == nil || e.Verdict != NeedsReview || !strings.Contains(e.Reason, "util.js") {
		t.Fatalf("run = %+v, evidence %+v", run, e)
	}
	if u := e.Unpinned(); len(u) != 1 || u[0].File != "util.js" {
		t.Errorf("unpinned = %+v", u)
	}
	if c := e.Coverage; c.Changed != 3 || c.Executed != 2 || !slices.Equal(c.Missed, []string{"util.js:1"}) {
		t.Errorf("coverage = %+v", c)
	}
	if md := e.Markdown(); !strings.Contains(md, "not pinned by any test") || !strings.Contains(md, "**needs review**") {
		t.Errorf("markdown:\n%s", md)
	}
}
