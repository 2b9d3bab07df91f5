package runner

import (
	"context"
	"fmt"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// FixIn is Fix in a sandbox the caller made ready (workflow/branch forks
// one set-up checkpoint into many): sb runs, and its Dir holds o.Repo's
// committed tree plus whatever the set-up left beside it. The run owns sb
// and removes it at the end. Unlike Fix, a task on a green base is work
// to do (a feature, a sub-task), not nothing to fix: the agent gets one
// turn before the loop judges it.
func (rn *Runner) FixIn(ctx context.Context, o Options, sb string) (*Run, error) {
	if err := o.defaults(); err != nil {
		rn.Service.Remove(context.WithoutCancel(ctx), sb, true)
		return nil, err
	}
	r := &run{svc: rn.Service, log: rn.Log, o: o, id: newRunID(), start: time.Now(), flaky: map[string]bool{}}
	if err := r.open(ctx, ""); err != nil {
		r.remove(ctx, sb)
		return nil, err
	}
	defer r.closeScratch()
	r.rec = &Run{ID: r.id, Created: r.start.UTC(), Repo: r.scr.repo, Task: o.Task, Test: o.Test,
		Agent: o.AgentName, Base: r.scr.base, State: Running}
	if err := r.log.Save(ctx, r.rec); err != nil {
		r.remove(ctx, sb)
		return nil, err
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
	if !r.green(base) {
		return r.loop(ctx, &sb, 0)
	}
	r.emit(1, "agent", nil, "")
	u, err := o.Agent.Step(ctx, Step{Service: r.svc, Sandbox: sb, Dir: Dir, N: 1, Task: o.Task, Feedback: r.feedback(it),
		Diff: func(ctx context.Context) (string, error) { return r.diffOf(ctx, sb, it.Commit, 1) }})
	r.rec.Usage.add(u)
	if err != nil {
		return r.finish(ctx, fmt.Sprintf("agent: %v", err))
	}
	next, err := r.iterate(ctx, &sb, it, 1, u)
	if err != nil {
		return r.fail(ctx, err)
	}
	r.its = append(r.its, next)
	if err := r.log.Add(ctx, r.id, next); err != nil {
		return r.fail(ctx, err)
	}
	if next.Result == nil {
		// Rejected and rolled back: the base stands.
		r.emit(1, "rejected", nil, fmt.Sprintf("%d violation(s)", len(next.Violations)))
		return r.loop(ctx, &sb, 0)
	}
	r.emit(1, "tests", next.Result, "")
	return r.loop(ctx, &sb, 1)
}

// RunTests runs a test command with sh -c in sb's Dir and parses what it
// printed, as every iteration does.
func RunTests(ctx context.Context, svc sandbox.Service, sb, test string, timeout time.Duration) (testparse.Result, error) {
	r := &run{svc: svc, o: Options{Test: test, TestTimeout: cmp0(timeout, DefaultTestTimeout)}}
	return r.runTests(ctx, sb)
}
