package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/runner/testparse"
)

// What the evidence says of a change.
const (
	Proven      = "proven"       // every code hunk pinned by a test, no regressions
	NeedsReview = "needs review" // resolved, but some hunk no test needs (or a regression)
	Unresolved  = "unresolved"   // the pristine tests are not green
)

// DefaultPinParallel bounds the copies that test one reverted hunk each
// at a time.
const DefaultPinParallel = 4

// Evidence is what a reviewer needs to trust a change: which tests it
// fixed, which it kept passing, which hunks a test pins, which changed
// lines the tests ran.
type Evidence struct {
	Verdict string `json:"verdict"` // proven, needs review, unresolved
	Reason  string `json:"reason,omitempty"`
	// FailToPass and PassToPass are SWE-bench's: tests failing on the
	// base and passing after, and tests passing on both (the pristine
	// test files each time; flaky tests aside).
	FailToPass []string `json:"fail_to_pass"`
	PassToPass []string `json:"pass_to_pass"`
	PassToFail []string `json:"pass_to_fail,omitempty"` // regressions
	// ProveNothing are tests the agent added that pass on the base code
	// already (TestCheck).
	ProveNothing []string  `json:"prove_nothing,omitempty"`
	Hunks        []HunkPin `json:"hunks,omitempty"`
	Coverage     Coverage  `json:"coverage"`
	// Elapsed is what gathering the evidence added to the run.
	Elapsed time.Duration `json:"elapsed"`
}

// HunkPin is one hunk of the final diff and whether a test needs it: a
// copy of the verdict's sandbox with only that hunk reverted ran the
// tests.
type HunkPin struct {
	File   string `json:"file"`
	Header string `json:"header"` // the @@ line
	// Test marks a test file's hunk: the verdict runs the pristine test
	// files, so no test pins it; the test check on the base judged it.
	Test   bool     `json:"test,omitempty"`
	Pinned bool     `json:"pinned"`
	By     []string `json:"by,omitempty"` // the tests that fail without it
	Note   string   `json:"note,omitempty"`
}

// Unpinned lists the code hunks no test needs.
func (e *Evidence) Unpinned() []HunkPin {
	var out []HunkPin
	for _, h := range e.Hunks {
		if !h.Test && !h.Pinned {
			out = append(out, h)
		}
	}
	return out
}

// evidence gathers the review evidence of best's change: the test lists
// from the base run and the verdict v; for a resolved run, the hunks
// pinned in copies of sb (the verdict's sandbox) and the diff coverage
// cov the verdict run measured.
func (r *run) evidence(ctx context.Context, sb string, best Iteration, v testparse.Result, cov coverageData) (*Evidence, error) {
	t0 := time.Now()
	e := &Evidence{Verdict: Unresolved}
	e.FailToPass, e.PassToPass, e.PassToFail = r.transitions(v)
	if best.Tests != nil {
		e.ProveNothing = best.Tests.ProveNothing
	}
	if r.rec.State != Resolved {
		e.Reason = "the pristine tests are not green"
		if best.N == 0 {
			e.Reason = "no change: the base stayed the best iteration"
		}
		e.Elapsed = time.Since(t0)
		return e, nil
	}
	files := guard.ParseDiff(best.Diff)
	var err error
	if e.Hunks, err = r.pin(ctx, sb, best.Commit, files, r.o.PinParallel); err != nil {
		return nil, err
	}
	if e.Coverage, err = r.coverage(ctx, best.Commit, files, cov); err != nil {
		return nil, err
	}
	e.Verdict, e.Reason = judgeEvidence(e, r.o.PinParallel < 0)
	e.Elapsed = time.Since(t0)
	return e, nil
}

// transitions sorts the tests by their base and verdict statuses.
func (r *run) transitions(v testparse.Result) (f2p, p2p, p2f []string) {
	f2p, p2p = []string{}, []string{}
	for _, t := range v.Tests {
		was := r.baseResult.Status(t.Name)
		switch {
		case r.flaky[t.Name]:
		case was == testparse.Fail && t.Status == testparse.Pass:
			f2p = append(f2p, t.Name)
		case was == testparse.Pass && t.Status == testparse.Pass:
			p2p = append(p2p, t.Name)
		case was == testparse.Pass && t.Status == testparse.Fail:
			p2f = append(p2f, t.Name)
		}
	}
	return f2p, p2p, p2f
}

func judgeEvidence(e *Evidence, pinningOff bool) (string, string) {
	code := slices.IndexFunc(e.Hunks, func(h HunkPin) bool { return !h.Test }) >= 0
	var why []string
	if len(e.PassToFail) > 0 {
		why = append(why, "regressions: "+strings.Join(e.PassToFail, ", "))
	}
	switch {
	case !code:
		why = append(why, "the change has no code hunk")
	case pinningOff:
		why = append(why, "hunks not pinned (pinning off)")
	default:
		for _, h := range e.Unpinned() {
			why = append(why, fmt.Sprintf("%s %s is not pinned by any test", h.File, h.Header))
		}
	}
	if len(why) > 0 {
		return NeedsReview, strings.Join(why, "; ")
	}
	return Proven, "every hunk is pinned by a test; no regressions"
}

// pin reverts each code hunk of files, alone, in a copy of sb (forked
// parallel at a time; below 1: no pinning) and runs the tests there: a
// hunk whose revert leaves them green is pinned by no test. The pins
// are in the diff's order.
func (r *run) pin(ctx context.Context, sb, commit string, files []guard.File, parallel int) ([]HunkPin, error) {
	var pins []HunkPin
	var jobs []pinJob
	for _, f := range files {
		test := r.policy.IsTest(f.Path) || r.policy.IsTest(f.OldPath)
		for _, h := range f.Hunks {
			if !test && parallel > 0 {
				jobs = append(jobs, pinJob{at: len(pins), f: f, h: h})
			}
			pins = append(pins, HunkPin{File: f.Path, Header: h.Header, Test: test})
		}
	}
	for len(jobs) > 0 {
		wave := jobs[:min(parallel, len(jobs))]
		jobs = jobs[len(wave):]
		if err := r.inCopies(ctx, sb, commit, wave, pins); err != nil {
			return nil, err
		}
	}
	return pins, nil
}

// pinJob is a hunk to revert, and its place among the pins.
type pinJob struct {
	at int
	f  guard.File
	h  guard.Hunk
}

// inCopies forks sb once per job and pins each job's hunk in its copy,
// all at once.
func (r *run) inCopies(ctx context.Context, sb, commit string, jobs []pinJob, pins []HunkPin) error {
	copies, err := r.svc.Fork(ctx, sb, sandbox.ForkOptions{N: len(jobs)})
	if err != nil {
		return fmt.Errorf("fork %s: %w", sb, err)
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.remove(ctx, copies[i].ID)
			pins[j.at], errs[i] = r.pinOne(ctx, copies[i].ID, commit, j.f, j.h)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pinOne reverts h (of f, at commit) in copy and runs the tests.
func (r *run) pinOne(ctx context.Context, copy, commit string, f guard.File, h guard.Hunk) (HunkPin, error) {
	p := HunkPin{File: f.Path, Header: h.Header}
	now := ""
	if !f.Deleted {
		data, err := r.scr.file(ctx, commit, f.Path)
		if err != nil {
			return p, err
		}
		now = string(data)
	}
	old, err := h.Revert(now)
	if err != nil {
		return p, fmt.Errorf("revert %s %s: %w", f.Path, h.Header, err)
	}
	if err := r.putContent(ctx, copy, f.Path, old, f.New && old == ""); err != nil {
		return p, err
	}
	res, err := r.runTests(ctx, copy)
	if err != nil {
		return p, fmt.Errorf("tests without %s %s: %w", f.Path, h.Header, err)
	}
	p.Pinned = !r.green(res)
	if p.By = r.realFailing(res); len(p.By) > 5 {
		p.By = append(p.By[:5], fmt.Sprintf("(%d more)", len(p.By)-5))
	}
	if p.Pinned && len(p.By) == 0 {
		p.Note = fmt.Sprintf("the tests exit %d without it", res.Exit)
	}
	return p, nil
}

// Markdown is the evidence for a PR body or a terminal.
func (e *Evidence) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %s\n\n", e.Verdict, e.Reason)
	fmt.Fprintf(&b, "- fail-to-pass (%d): %s\n", len(e.FailToPass), names(e.FailToPass))
	fmt.Fprintf(&b, "- pass-to-pass (%d): %s\n", len(e.PassToPass), names(e.PassToPass))
	fmt.Fprintf(&b, "- regressions, pass-to-fail (%d): %s\n", len(e.PassToFail), names(e.PassToFail))
	if len(e.ProveNothing) > 0 {
		fmt.Fprintf(&b, "- added tests that pass on the base code already (they prove nothing about the fix): %s\n", names(e.ProveNothing))
	}
	if len(e.Hunks) > 0 {
		b.WriteString("\n| hunk | pinned by (tests failing with only this hunk reverted) |\n| --- | --- |\n")
		for _, h := range e.Hunks {
			fmt.Fprintf(&b, "| `%s` `%s` | %s |\n", h.File, h.Header, h.pinText())
		}
	}
	c := e.Coverage
	if c.Tool == "" {
		fmt.Fprintf(&b, "\nDiff coverage: %s\n", c.Note)
	} else {
		fmt.Fprintf(&b, "\nDiff coverage (%s): %d of %d changed lines executed", c.Tool, c.Executed, c.Changed)
		if len(c.Missed) > 0 {
			fmt.Fprintf(&b, "; not executed: %s", names(c.Missed))
		}
		if c.Note != "" {
			b.WriteString("; " + c.Note)
		}
		b.WriteString("\n")
		if len(c.Files) > 1 {
			for _, f := range c.Files {
				fmt.Fprintf(&b, "- `%s` (%s): %d of %d executed", f.File, f.Tool, f.Executed, f.Changed)
				if len(f.Missed) > 0 {
					fmt.Fprintf(&b, "; not executed: lines %s", lineList(f.Missed))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

func (h HunkPin) pinText() string {
	switch {
	case h.Test:
		return "a test file: not pinned (the agent's test files were run on the base code instead)"
	case !h.Pinned:
		return "**not pinned by any test: review it**"
	case len(h.By) > 0:
		return strings.Join(h.By, ", ")
	}
	return h.Note
}

// names shows at most 20 names.
func names(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	if len(list) > 20 {
		return strings.Join(list[:20], ", ") + fmt.Sprintf(", … (%d more)", len(list)-20)
	}
	return strings.Join(list, ", ")
}

// lineList shows line numbers, at most 20.
func lineList(lines []int) string {
	s := make([]string, len(lines))
	for i, n := range lines {
		s[i] = fmt.Sprint(n)
	}
	return names(s)
}
