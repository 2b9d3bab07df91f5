// Package workspace brings an agent's changes from a sandbox back into the
// user's tree, under the trust policy.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// Outcome is what happened to a change.
type Outcome string

const (
	Applied  Outcome = "applied"  // written to the tree
	Denied   Outcome = "denied"   // the policy or a person refused it
	Rejected Outcome = "rejected" // unsafe whatever the policy says
	Failed   Outcome = "failed"   // allowed, but writing it failed
	Skipped  Outcome = "skipped"  // a dry run: decided, not applied
)

// Change is one file that differs between the sandbox and the tree, and
// what became of it.
type Change struct {
	Path string `json:"path"` // slash-separated, relative to the tree
	Kind Kind   `json:"change"`
	// Verdict is what the policy says; for an ask, Outcome says how it
	// was answered.
	Verdict trust.Outcome `json:"verdict,omitzero"`
	Outcome Outcome       `json:"outcome"`
	Rule    string        `json:"rule,omitempty"`
	Reason  string        `json:"reason"`
}

// Report lists every change found, sorted by path.
type Report struct {
	Sandbox string   `json:"sandbox"`
	Dir     string   `json:"dir"`
	Tree    string   `json:"tree"`
	DryRun  bool     `json:"dry_run,omitempty"`
	Changes []Change `json:"changes"`
}

// Complete reports whether every change was applied, or in a dry run
// would be applied without asking anyone.
func (r Report) Complete() bool {
	for _, c := range r.Changes {
		if c.Outcome != Applied && !(c.Outcome == Skipped && c.Verdict == trust.Allow) {
			return false
		}
	}
	return true
}

// Options say what to apply where.
type Options struct {
	Manager sandbox.Service
	Sandbox string // name or ID of a running sandbox
	Dir     string // directory inside the sandbox
	Tree    string // host directory the changes go to
	// Ledger records decisions and holds asks; not needed for a dry run.
	Ledger    *trust.Ledger
	Requester string // who asks, for approvals and the audit log
	// DryRun decides every change without applying it, recording it or
	// asking anyone.
	DryRun bool
	// Log, if set, is told which changes wait for a person.
	Log io.Writer
}

// Apply copies Dir out of the sandbox, compares it with Tree, and applies
// each changed file the policy of Tree allows: at once for allow, after
// an approval for ask. A deletion is a write. Each file is replaced
// atomically; nothing is ever written outside Tree, nor through a symlink.
// The error is non-nil when the changes could not be found or some
// allowed change could not be written; denials are in the Report only.
func Apply(ctx context.Context, o Options) (Report, error) {
	r := Report{Sandbox: o.Sandbox, Dir: o.Dir, Tree: o.Tree, DryRun: o.DryRun}
	tmp, err := os.MkdirTemp("", "smolvm-apply-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := o.Manager.CopyOut(ctx, o.Sandbox, o.Dir, src); err != nil {
		return r, err
	}
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return r, fmt.Errorf("apply: %s:%s is not a directory", o.Sandbox, o.Dir)
	}
	return applyDir(ctx, src, o)
}

// applyDir applies the differences between the host directory src and
// o.Tree.
func applyDir(ctx context.Context, src string, o Options) (Report, error) {
	r := Report{Sandbox: o.Sandbox, Dir: o.Dir, Tree: o.Tree, DryRun: o.DryRun}
	tree, err := filepath.Abs(o.Tree)
	if err != nil {
		return r, err
	}
	if fi, err := os.Stat(tree); err != nil || !fi.IsDir() {
		return r, fmt.Errorf("apply: tree %s is not a directory", o.Tree)
	}
	// Loaded once, before anything changes: a policy file in the diff is
	// judged by the policy in force, and cannot loosen its own check.
	p, err := trust.Load(tree)
	if err != nil {
		return r, err
	}
	if !o.DryRun && o.Ledger == nil {
		return r, errors.New("apply: no ledger to record decisions in")
	}
	found, err := diff(src, tree)
	if err != nil {
		return r, err
	}
	r.Changes = make([]Change, len(found))
	for i, c := range found {
		r.Changes[i] = Change{Path: c.path, Kind: c.kind}
		if reason := unsafe(src, c); reason != "" {
			r.Changes[i].Outcome, r.Changes[i].Reason = Rejected, reason
			continue
		}
		d := p.Evaluate(trust.Action{Kind: trust.Write, Target: c.path})
		r.Changes[i].Verdict, r.Changes[i].Rule, r.Changes[i].Reason = d.Outcome, d.RuleText(), d.Reason
	}
	if o.DryRun {
		for i := range r.Changes {
			if r.Changes[i].Outcome == "" {
				r.Changes[i].Outcome = Skipped
			}
		}
		return r, nil
	}
	gate := &trust.Gate{Policy: p, Ledger: o.Ledger}
	decide(ctx, gate, o, r.Changes)
	if err := ctx.Err(); err != nil {
		// Interrupted while waiting: apply nothing, even what was allowed.
		return r, err
	}
	w, err := newWriter(src, tree)
	if err != nil {
		return r, err
	}
	defer w.close()
	// Deletions first, deepest first, so that a directory replaced by a
	// file (or a file by a directory) is out of the way.
	for i := len(found) - 1; i >= 0; i-- {
		if found[i].kind == Deleted && r.Changes[i].Outcome == "" {
			settle(&r.Changes[i], w.remove(found[i].path))
		}
	}
	for i, c := range found {
		if c.kind != Deleted && r.Changes[i].Outcome == "" {
			settle(&r.Changes[i], w.write(c.path, c.src))
		}
	}
	n := 0
	for _, c := range r.Changes {
		if c.Outcome == Failed {
			n++
		}
	}
	if n > 0 {
		return r, fmt.Errorf("apply: %d of %d changes could not be written", n, len(r.Changes))
	}
	return r, nil
}

// unsafe says why a change may not be applied whatever the policy says,
// or returns "".
func unsafe(src string, c change) string {
	if !filepath.IsLocal(filepath.FromSlash(c.path)) {
		return "path is not inside the tree"
	}
	if c.kind == Deleted || !c.src.symlink() {
		return ""
	}
	target, err := os.Readlink(filepath.Join(src, filepath.FromSlash(c.path)))
	if err != nil {
		return err.Error()
	}
	if escapes(src, c.path, target) {
		return fmt.Sprintf("symlink to %s points outside the tree", target)
	}
	return ""
}

// maxWaiting bounds the asks waiting at once.
const maxWaiting = 32

// decide puts every change not yet settled through the gate. The checks
// run concurrently, so every ask is pending at once and a person can
// answer them in any order; a change left undecided is allowed.
func decide(ctx context.Context, gate *trust.Gate, o Options, cs []Change) {
	var asks []string
	for _, c := range cs {
		if c.Outcome == "" && c.Verdict == trust.Ask {
			asks = append(asks, c.Path)
		}
	}
	if len(asks) > 0 && o.Log != nil {
		fmt.Fprintf(o.Log, "waiting for approval of %d change(s) (smolvm approvals ls, then approve|deny ID): %s\n",
			len(asks), strings.Join(asks, ", "))
	}
	sem := make(chan struct{}, maxWaiting)
	var wg sync.WaitGroup
	for i := range cs {
		if cs[i].Outcome != "" {
			continue
		}
		c := &cs[i]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := gate.Check(ctx, trust.Action{Kind: trust.Write, Target: c.Path}, o.Requester)
			var de *trust.DeniedError
			switch {
			case err == nil:
			case errors.As(err, &de):
				c.Outcome = Denied
				if de.By != "policy" {
					c.Reason = err.Error()
				}
			default:
				// The ledger failed: nothing was decided, so nothing is done.
				c.Outcome, c.Reason = Failed, err.Error()
			}
		})
	}
	wg.Wait()
}

// settle records the result of writing an allowed change.
func settle(c *Change, err error) {
	if err != nil {
		c.Outcome, c.Reason = Failed, err.Error()
		return
	}
	c.Outcome = Applied
}
