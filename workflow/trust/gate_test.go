package trust

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
)

const gatePolicy = `[run]
allow = ["ls"]
ask = ["make"]
deny = ["rm"]
`

// openLedger opens a fresh ledger on its own database connection, as
// another smolvm process would.
func openLedger(t *testing.T, dir string) *Ledger {
	t.Helper()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := OpenLedger(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newGate(t *testing.T) (*Gate, string) {
	t.Helper()
	dir := t.TempDir()
	return &Gate{Policy: parseText(t, gatePolicy), Ledger: openLedger(t, dir), Poll: 10 * time.Millisecond}, dir
}

// pending waits until exactly one approval is pending and returns it.
func pending(t *testing.T, l *Ledger) Approval {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		aps, err := l.Approvals(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(aps) == 1 {
			return aps[0]
		}
		if len(aps) > 1 {
			t.Fatalf("%d pending approvals, want 1", len(aps))
		}
	}
	t.Fatal("no approval became pending")
	return Approval{}
}

func audit(t *testing.T, l *Ledger) []Record {
	t.Helper()
	recs, err := l.Audit(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestCheckAllowDeny(t *testing.T) {
	g, _ := newGate(t)
	ctx := context.Background()
	if err := g.Check(ctx, Action{Kind: Run, Target: "ls -l"}, "agent-1"); err != nil {
		t.Errorf("ls: %v", err)
	}
	err := g.Check(ctx, Action{Kind: Run, Target: "ls && rm -rf x"}, "agent-1")
	var de *DeniedError
	if !errors.As(err, &de) || !errors.Is(err, ErrDenied) || de.By != "policy" {
		t.Fatalf("rm: %v, want a policy DeniedError", err)
	}
	if de.Decision.Rule == nil || de.Decision.Rule.Pattern != "rm" {
		t.Errorf("denied by %v, want the rm rule", de.Decision.Rule)
	}
}

func TestAskApprove(t *testing.T) {
	g, dir := newGate(t)
	approver := openLedger(t, dir)
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background(), Action{Kind: Run, Target: "make all"}, "agent-1") }()
	ap := pending(t, approver)
	if ap.Requester != "agent-1" || ap.Action.Target != "make all" || !strings.Contains(ap.Rule, "policy.toml:3") {
		t.Errorf("pending approval %+v", ap)
	}
	select {
	case err := <-done:
		t.Fatalf("Check returned %v before an answer", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := approver.Answer(context.Background(), ap.ID, true, "alice", "looks fine"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("approved Check: %v", err)
	}
	if err := approver.Answer(context.Background(), ap.ID, false, "bob", ""); !errors.Is(err, ErrAnswered) {
		t.Errorf("second answer: %v, want ErrAnswered", err)
	}
	recs := audit(t, g.Ledger)
	if len(recs) != 1 {
		t.Fatalf("%d audit records, want 1", len(recs))
	}
	r := recs[0]
	if r.Verdict != Ask || r.Outcome != Allow || r.By != "alice" || r.Why != "looks fine" || r.Approval != ap.ID {
		t.Errorf("audit record %+v", r)
	}
}

func TestAskDeny(t *testing.T) {
	g, dir := newGate(t)
	approver := openLedger(t, dir)
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background(), Action{Kind: Run, Target: "make"}, "agent-1") }()
	ap := pending(t, approver)
	if err := approver.Answer(context.Background(), ap.ID, false, "bob", "not now"); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var de *DeniedError
	if !errors.As(err, &de) || de.By != "bob" || de.Why != "not now" {
		t.Fatalf("denied Check: %v", err)
	}
}

func TestAskTimeout(t *testing.T) {
	g, _ := newGate(t)
	g.Timeout = 100 * time.Millisecond
	start := time.Now()
	err := g.Check(context.Background(), Action{Kind: Run, Target: "make"}, "agent-1")
	var de *DeniedError
	if !errors.As(err, &de) || de.By != Expired {
		t.Fatalf("Check: %v, want an expiry", err)
	}
	if el := time.Since(start); el < g.Timeout {
		t.Errorf("returned after %v, before the %v timeout", el, g.Timeout)
	}
	aps, err := g.Ledger.Approvals(context.Background(), true)
	if err != nil || len(aps) != 1 || aps[0].State != Expired {
		t.Fatalf("approvals %+v, %v: want one expired", aps, err)
	}
	if err := g.Ledger.Answer(context.Background(), aps[0].ID, true, "late", ""); !errors.Is(err, ErrAnswered) {
		t.Errorf("answering an expired approval: %v", err)
	}
	recs := audit(t, g.Ledger)
	if len(recs) != 1 || recs[0].Outcome != Deny || recs[0].By != Expired {
		t.Errorf("audit %+v", recs)
	}
}

func TestAskPolicyTimeout(t *testing.T) {
	dir := t.TempDir()
	g := &Gate{Policy: parseText(t, gatePolicy+"[approvals]\ntimeout = \"50ms\"\n"), Ledger: openLedger(t, dir), Poll: 10 * time.Millisecond}
	if err := g.Check(context.Background(), Action{Kind: Run, Target: "make"}, "a"); !errors.Is(err, ErrDenied) {
		t.Fatalf("Check: %v, want a deny after the policy's timeout", err)
	}
}

func TestAskCancel(t *testing.T) {
	g, _ := newGate(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Check(ctx, Action{Kind: Run, Target: "make"}, "agent-1") }()
	pending(t, g.Ledger)
	cancel()
	err := <-done
	var de *DeniedError
	if !errors.As(err, &de) || de.By != Cancelled {
		t.Fatalf("Check: %v, want cancelled", err)
	}
	aps, _ := g.Ledger.Approvals(context.Background(), true)
	if len(aps) != 1 || aps[0].State != Cancelled {
		t.Errorf("approvals %+v, want one cancelled", aps)
	}
	if recs := audit(t, g.Ledger); len(recs) != 1 || recs[0].By != Cancelled || recs[0].Outcome != Deny {
		t.Errorf("audit %+v", recs)
	}
}

func TestRacingApprovers(t *testing.T) {
	g, dir := newGate(t)
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background(), Action{Kind: Run, Target: "make"}, "agent-1") }()
	ap := pending(t, openLedger(t, dir))
	const n = 8
	ledgers := make([]*Ledger, n)
	for i := range ledgers {
		ledgers[i] = openLedger(t, dir)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = ledgers[i].Answer(context.Background(), ap.ID, i%2 == 0, "approver-"+string(rune('a'+i)), "")
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("approvers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, ErrAnswered):
			t.Errorf("approver %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no approver won")
	}
	err := <-done
	if approved := winner%2 == 0; approved != (err == nil) {
		t.Errorf("winner %d approved=%v, Check returned %v", winner, approved, err)
	}
	if recs := audit(t, g.Ledger); len(recs) != 1 || recs[0].By != "approver-"+string(rune('a'+winner)) {
		t.Errorf("audit %+v, want the winner", recs)
	}
}

// TestApproverProcess is the approver run by TestApprovalFromAnotherProcess.
func TestApproverProcess(t *testing.T) {
	dir := os.Getenv("POLICY_TEST_APPROVER_DIR")
	if dir == "" {
		t.Skip("helper process for TestApprovalFromAnotherProcess")
	}
	l := openLedger(t, dir)
	ap := pending(t, l)
	if err := l.Answer(context.Background(), ap.ID, true, "other-process", "ok"); err != nil {
		t.Fatal(err)
	}
}

func TestApprovalFromAnotherProcess(t *testing.T) {
	g, dir := newGate(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestApproverProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "POLICY_TEST_APPROVER_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := g.Check(context.Background(), Action{Kind: Run, Target: "make"}, "agent-1")
	if werr := cmd.Wait(); werr != nil {
		t.Fatalf("approver process: %v", werr)
	}
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if recs := audit(t, g.Ledger); len(recs) != 1 || recs[0].By != "other-process" {
		t.Errorf("audit %+v", recs)
	}
}

func TestAuditCompleteness(t *testing.T) {
	g, dir := newGate(t)
	g.Timeout = 50 * time.Millisecond
	approver := openLedger(t, dir)
	ctx := context.Background()
	type want struct {
		action           Action
		requester        string
		verdict, outcome Outcome
		rule, by         string
		approval         bool
	}
	var wants []want
	check := func(a Action, requester string, w want) {
		t.Helper()
		g.Check(ctx, a, requester)
		w.action, w.requester = a, requester
		wants = append(wants, w)
	}
	check(Action{Kind: Run, Target: "ls"}, "r1", want{verdict: Allow, outcome: Allow, rule: "policy.toml:2", by: "policy"})
	check(Action{Kind: Run, Target: "ls; rm x"}, "r2", want{verdict: Deny, outcome: Deny, rule: "policy.toml:4", by: "policy"})
	check(Action{Kind: Write, Target: "a.txt"}, "r3", want{verdict: Ask, outcome: Deny, rule: "default", by: Expired, approval: true})
	go func() {
		for {
			if aps, _ := approver.Approvals(ctx, false); len(aps) > 0 {
				approver.Answer(ctx, aps[0].ID, true, "carol", "")
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	g.Timeout = time.Minute
	check(Action{Kind: Run, Target: "make"}, "r4", want{verdict: Ask, outcome: Allow, rule: "policy.toml:3", by: "carol", approval: true})
	d, err := g.Evaluate(ctx, Action{Kind: Memory}, "r5")
	if err != nil || d.Outcome != Ask {
		t.Fatalf("Evaluate: %v %v", d.Outcome, err)
	}
	wants = append(wants, want{action: Action{Kind: Memory}, requester: "r5", verdict: Ask, outcome: Ask, rule: "default", by: "policy"})

	recs := audit(t, g.Ledger)
	if len(recs) != len(wants) {
		t.Fatalf("%d audit records for %d decisions", len(recs), len(wants))
	}
	for i, w := range wants {
		r := recs[i]
		if r.Action.String() != w.action.String() || r.Requester != w.requester || r.Verdict != w.verdict ||
			r.Outcome != w.outcome || !strings.Contains(r.Rule, w.rule) || r.By != w.by || (r.Approval != "") != w.approval ||
			r.Time.IsZero() || r.Repo != g.Policy.Root || r.Reason == "" {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
		if i > 0 && (r.Seq <= recs[i-1].Seq || r.Time.Before(recs[i-1].Time)) {
			t.Errorf("record %d is out of order", i)
		}
	}
	if len(recs[1].Parts) != 2 || recs[1].Parts[1].Outcome != Deny {
		t.Errorf("compound command parts not recorded: %+v", recs[1].Parts)
	}
	// --since filters by time.
	later, err := g.Ledger.Audit(ctx, recs[len(recs)-1].Time.Add(time.Millisecond))
	if err != nil || len(later) != 0 {
		t.Errorf("audit since after the last record: %d records, %v", len(later), err)
	}
}

func TestAuditAppendOnly(t *testing.T) {
	g, _ := newGate(t)
	ctx := context.Background()
	if err := g.Check(ctx, Action{Kind: Run, Target: "ls"}, "r"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE policy_audit SET outcome = 'deny'`,
		`UPDATE policy_audit SET decided_by = 'someone' WHERE seq = 1`,
		`DELETE FROM policy_audit`,
		`DELETE FROM policy_audit WHERE seq = 1`,
	} {
		_, err := g.Ledger.db.ExecContext(ctx, stmt)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused", stmt, err)
		}
	}
	recs := audit(t, g.Ledger)
	if len(recs) != 1 || recs[0].Outcome != Allow || recs[0].By != "policy" {
		t.Errorf("audit changed: %+v", recs)
	}
}
