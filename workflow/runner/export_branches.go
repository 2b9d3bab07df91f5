package runner

import (
	"context"
	"fmt"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// firstTurn gives the agent one turn on a green base (FixIn's work to
// do), then hands over to the loop.
func (r *run) firstTurn(ctx context.Context, sb *string, it Iteration) (*Run, error) {
	o := r.o
	r.emit(1, "agent", nil, "")
	u, err := o.Agent.Step(ctx, Step{Service: r.svc, Sandbox: *sb, Dir: Dir, N: 1, Task: o.Task, Feedback: r.feedback(it),
		Diff: func(ctx context.Context) (string, error) { return r.diffOf(ctx, *sb, it.Commit, 1) }})
	r.rec.Usage.add(u)
	if err != nil {
		return r.finish(ctx, fmt.Sprintf("agent: %v", err))
	}
	next, err := r.iterate(ctx, sb, it, 1, u)
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
		return r.loop(ctx, sb, 0)
	}
	r.emit(1, "tests", next.Result, "")
	return r.loop(ctx, sb, 1)
}

// RunTests runs a test command with sh -c in sb's Dir and parses what it
// printed, as every iteration does.
func RunTests(ctx context.Context, svc sandbox.Service, sb, test string, timeout time.Duration) (testparse.Result, error) {
	r := &run{svc: svc, o: Options{Test: test, TestTimeout: cmp0(timeout, DefaultTestTimeout)}}
	return r.runTests(ctx, sb)
}
