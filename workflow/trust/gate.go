package trust

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
)

// ErrDenied matches every error Check returns for an action that may not
// proceed.
var ErrDenied = errdefs.New(errdefs.ErrDenied, "denied by policy")

// DeniedError says why an action may not proceed.
type DeniedError struct {
	Decision Decision
	By       string // "policy", the approver, "timeout" or "cancelled"
	Why      string
}

func (e *DeniedError) Error() string {
	switch e.By {
	case "policy":
		return fmt.Sprintf("%s: policy denies it: %s", e.Decision.Action, e.Decision.Reason)
	case Expired:
		return fmt.Sprintf("%s: nobody approved it in time", e.Decision.Action)
	case Cancelled:
		return fmt.Sprintf("%s: cancelled while waiting for approval", e.Decision.Action)
	}
	s := fmt.Sprintf("%s: denied by %s", e.Decision.Action, e.By)
	if e.Why != "" {
		s += ": " + e.Why
	}
	return s
}

func (e *DeniedError) Is(target error) bool { return errors.Is(ErrDenied, target) }

// DefaultPoll is how often a waiting Check looks for an answer.
const DefaultPoll = 200 * time.Millisecond

// Gate enforces a policy: it audits every decision and holds asks until a
// person answers them through the ledger, possibly from another process.
type Gate struct {
	Policy *Policy
	Ledger *Ledger
	// Timeout bounds the wait for an answer; zero means Policy.Timeout.
	Timeout time.Duration
	// Poll is how often the ledger is read while waiting; zero means
	// DefaultPoll.
	Poll time.Duration
}

// Evaluate decides a without waiting for anyone and records the decision;
// an ask stays an ask. Callers that can fall back instead of blocking
// (memory changes become proposals) use it.
func (g *Gate) Evaluate(ctx context.Context, a Action, requester string) (Decision, error) {
	d := g.Policy.Evaluate(a)
	return d, g.Ledger.record(ctx, g.record(d, requester, d.Outcome, "policy"))
}

// Check returns nil if a may proceed. An ask creates a pending approval
// and blocks until it is approved, denied or times out; a timeout or a
// cancelled ctx denies. Every call leaves exactly one audit record. Errors
// for actions that may not proceed match ErrDenied; any other error (the
// database failing) must be taken as a deny too.
func (g *Gate) Check(ctx context.Context, a Action, requester string) error {
	d := g.Policy.Evaluate(a)
	switch d.Outcome {
	case Allow:
		return g.Ledger.record(ctx, g.record(d, requester, Allow, "policy"))
	case Ask:
		return g.wait(ctx, d, requester)
	}
	if err := g.Ledger.record(ctx, g.record(d, requester, Deny, "policy")); err != nil {
		return err
	}
	return &DeniedError{Decision: d, By: "policy"}
}

func (g *Gate) wait(ctx context.Context, d Decision, requester string) error {
	timeout := orDefault(g.Timeout, g.Policy.Timeout)
	now := store.Now()
	ap := Approval{
		ID: newID(), Created: now, Deadline: now.Add(timeout),
		Requester: requester, Repo: g.Policy.Root, Action: d.Action,
		Rule: d.RuleText(), Reason: d.Reason,
	}
	if err := g.Ledger.request(ctx, ap); err != nil {
		return err
	}
	ap, err := g.await(ctx, ap.ID, timeout)
	if err != nil {
		return err
	}
	// The outcome is recorded even when ctx is done.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r := g.record(d, requester, Deny, ap.By)
	r.Approval, r.Why = ap.ID, ap.Why
	if ap.State == Approved {
		r.Outcome = Allow
	}
	if err := g.Ledger.record(wctx, r); err != nil {
		return err
	}
	if r.Outcome == Allow {
		return nil
	}
	return &DeniedError{Decision: d, By: ap.By, Why: ap.Why}
}

// await polls the ledger until the approval is answered, expires, or ctx
// is done, and returns its final state.
func (g *Gate) await(ctx context.Context, id string, timeout time.Duration) (Approval, error) {
	tick := time.NewTicker(orDefault(g.Poll, DefaultPoll))
	defer tick.Stop()
	expire := time.NewTimer(timeout)
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			// Best effort: a row left pending expires at its deadline anyway.
			g.Ledger.close(wctx, id, Cancelled, Cancelled)
			// The caller is gone: even an answer that just got in denies.
			return Approval{ID: id, State: Cancelled, By: Cancelled}, nil
		case <-expire.C:
			return g.Ledger.close(ctx, id, Expired, Expired)
		case <-tick.C:
			ap, err := g.Ledger.Approval(ctx, id)
			if err == nil && ap.State != Pending {
				return ap, nil
			}
			// A failed read (a busy database) is retried on the next tick.
		}
	}
}

func (g *Gate) record(d Decision, requester string, outcome Outcome, by string) Record {
	return Record{
		Time: store.Now(), Requester: requester, Repo: g.Policy.Root,
		Action: d.Action, Verdict: d.Outcome, Outcome: outcome,
		Rule: d.RuleText(), Reason: d.Reason, Parts: d.Parts, By: by,
	}
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
