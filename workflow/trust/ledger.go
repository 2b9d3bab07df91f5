package trust

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/store"
)

// schema is the policy component's part of the state database. The audit
// table is append-only: triggers refuse every UPDATE and DELETE.
var schema = []string{
	`CREATE TABLE policy_approvals (
		id         TEXT PRIMARY KEY,
		created    INTEGER NOT NULL,
		deadline   INTEGER NOT NULL,
		requester  TEXT NOT NULL,
		repo       TEXT NOT NULL,
		action     TEXT NOT NULL,
		rule       TEXT NOT NULL,
		reason     TEXT NOT NULL,
		state      TEXT NOT NULL DEFAULT 'pending'
		           CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
		decided    INTEGER,
		decided_by TEXT NOT NULL DEFAULT '',
		why        TEXT NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX policy_approvals_state ON policy_approvals(state, created)`,
	`CREATE TABLE policy_audit (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		time       INTEGER NOT NULL,
		requester  TEXT NOT NULL,
		repo       TEXT NOT NULL,
		kind       TEXT NOT NULL,
		action     TEXT NOT NULL,
		verdict    TEXT NOT NULL,
		outcome    TEXT NOT NULL,
		rule       TEXT NOT NULL,
		reason     TEXT NOT NULL,
		parts      TEXT NOT NULL,
		approval   TEXT NOT NULL,
		decided_by TEXT NOT NULL,
		why        TEXT NOT NULL
	)`,
	`CREATE INDEX policy_audit_time ON policy_audit(time)`,
	`CREATE TRIGGER policy_audit_no_update BEFORE UPDATE ON policy_audit
		BEGIN SELECT RAISE(ABORT, 'policy_audit is append-only'); END`,
	`CREATE TRIGGER policy_audit_no_delete BEFORE DELETE ON policy_audit
		BEGIN SELECT RAISE(ABORT, 'policy_audit is append-only'); END`,
}

// Approval states.
const (
	Pending   = "pending"
	Approved  = "approved"
	Denied    = "denied"
	Expired   = "expired"
	Cancelled = "cancelled"
)

// ErrAnswered is returned when answering an approval that is no longer
// pending, for instance because another approver was first.
var ErrAnswered = errdefs.New(errdefs.ErrConflict, "approval already answered")

// Ledger keeps pending approvals and the audit log in the state database,
// where every smolvm process sees them.
type Ledger struct {
	db *sql.DB
}

// OpenLedger applies the policy schema to st.
func OpenLedger(ctx context.Context, st *store.Store) (*Ledger, error) {
	if err := st.Migrate(ctx, "policy", schema); err != nil {
		return nil, err
	}
	return &Ledger{db: st.DB()}, nil
}

// Approval is a question from an ask, and its answer.
type Approval struct {
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	Deadline  time.Time `json:"deadline"`
	Requester string    `json:"requester"`
	Repo      string    `json:"repo"`
	Action    Action    `json:"action"`
	Rule      string    `json:"rule"`
	Reason    string    `json:"reason"`
	State     string    `json:"state"`
	Decided   time.Time `json:"decided,omitzero"`
	By        string    `json:"by,omitempty"`
	Why       string    `json:"why,omitempty"`
}

// Record is one audit log entry: a decision and who made it.
type Record struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	Requester string    `json:"requester"`
	Repo      string    `json:"repo"`
	Action    Action    `json:"action"`
	// Verdict is what the policy said; Outcome is what happened, which for
	// an ask is the answer (or deny on timeout).
	Verdict  Outcome        `json:"verdict"`
	Outcome  Outcome        `json:"outcome"`
	Rule     string         `json:"rule"`
	Reason   string         `json:"reason"`
	Parts    []PartDecision `json:"parts,omitempty"`
	Approval string         `json:"approval,omitempty"`
	By       string         `json:"by"` // "policy", an approver, "timeout" or "cancelled"
	Why      string         `json:"why,omitempty"`
}

func newID() string {
	b := make([]byte, 5)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func (l *Ledger) record(ctx context.Context, r Record) error {
	action, err := json.Marshal(r.Action)
	if err != nil {
		return err
	}
	parts, err := json.Marshal(r.Parts)
	if err != nil {
		return err
	}
	_, err = l.db.ExecContext(ctx, `INSERT INTO policy_audit
		(time, requester, repo, kind, action, verdict, outcome, rule, reason, parts, approval, decided_by, why)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ms(r.Time), r.Requester, r.Repo, string(r.Action.Kind), string(action), r.Verdict.String(), r.Outcome.String(),
		r.Rule, r.Reason, string(parts), r.Approval, r.By, r.Why)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// Audit returns the audit records since t, oldest first.
func (l *Ledger) Audit(ctx context.Context, since time.Time) ([]Record, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT seq, time, requester, repo, action, verdict, outcome, rule, reason, parts, approval, decided_by, why
		FROM policy_audit WHERE time >= ? ORDER BY seq`, ms(since))
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer rows.Close()
	var recs []Record
	for rows.Next() {
		var r Record
		var t int64
		var action, verdict, outcome, parts string
		if err := rows.Scan(&r.Seq, &t, &r.Requester, &r.Repo, &action, &verdict, &outcome, &r.Rule, &r.Reason, &parts, &r.Approval, &r.By, &r.Why); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		r.Time = fromMS(t)
		if err := errors.Join(json.Unmarshal([]byte(action), &r.Action), json.Unmarshal([]byte(parts), &r.Parts),
			r.Verdict.UnmarshalText([]byte(verdict)), r.Outcome.UnmarshalText([]byte(outcome))); err != nil {
			return nil, fmt.Errorf("audit record %d: %w", r.Seq, err)
		}
		recs = append(recs, r)
	}
	return recs, rows.Err()
}

func (l *Ledger) request(ctx context.Context, ap Approval) error {
	action, err := json.Marshal(ap.Action)
	if err != nil {
		return err
	}
	_, err = l.db.ExecContext(ctx, `INSERT INTO policy_approvals (id, created, deadline, requester, repo, action, rule, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		ap.ID, ms(ap.Created), ms(ap.Deadline), ap.Requester, ap.Repo, string(action), ap.Rule, ap.Reason)
	if err != nil {
		return fmt.Errorf("request approval: %w", err)
	}
	return nil
}

const approvalCols = `id, created, deadline, requester, repo, action, rule, reason, state, decided, decided_by, why`

func scanApproval(sc interface{ Scan(...any) error }) (Approval, error) {
	var ap Approval
	var created, deadline int64
	var decided sql.NullInt64
	var action string
	if err := sc.Scan(&ap.ID, &created, &deadline, &ap.Requester, &ap.Repo, &action, &ap.Rule, &ap.Reason, &ap.State, &decided, &ap.By, &ap.Why); err != nil {
		return ap, err
	}
	ap.Created, ap.Deadline = fromMS(created), fromMS(deadline)
	if decided.Valid {
		ap.Decided = fromMS(decided.Int64)
	}
	return ap, json.Unmarshal([]byte(action), &ap.Action)
}

// Approval returns one approval by ID.
func (l *Ledger) Approval(ctx context.Context, id string) (Approval, error) {
	ap, err := scanApproval(l.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM policy_approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return ap, fmt.Errorf("no approval %q", id)
	}
	if err != nil {
		return ap, fmt.Errorf("approval %s: %w", id, err)
	}
	return ap, nil
}

// Approvals lists the approvals still waiting for an answer, or all of
// them, oldest first.
func (l *Ledger) Approvals(ctx context.Context, all bool) ([]Approval, error) {
	q := `SELECT ` + approvalCols + ` FROM policy_approvals`
	var args []any
	if !all {
		q += ` WHERE state = 'pending' AND deadline > ?`
		args = append(args, ms(store.Now()))
	}
	rows, err := l.db.QueryContext(ctx, q+` ORDER BY created, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	defer rows.Close()
	var aps []Approval
	for rows.Next() {
		ap, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list approvals: %w", err)
		}
		aps = append(aps, ap)
	}
	return aps, rows.Err()
}

// Answer approves or denies a pending approval. The update only applies to
// a pending row whose deadline has not passed, so of two approvers racing
// exactly one wins; the other gets ErrAnswered.
func (l *Ledger) Answer(ctx context.Context, id string, approve bool, by, why string) error {
	state := Denied
	if approve {
		state = Approved
	}
	now := ms(store.Now())
	res, err := l.db.ExecContext(ctx, `UPDATE policy_approvals SET state = ?, decided = ?, decided_by = ?, why = ?
		WHERE id = ? AND state = 'pending' AND deadline > ?`, state, now, by, why, id, now)
	if err != nil {
		return fmt.Errorf("answer %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	ap, err := l.Approval(ctx, id)
	if err != nil {
		return err
	}
	if ap.State == Pending {
		return fmt.Errorf("answer %s: %w: it expired at %s", id, ErrAnswered, ap.Deadline.Format(time.RFC3339))
	}
	return fmt.Errorf("answer %s: %w: %s by %s", id, ErrAnswered, ap.State, ap.By)
}

// close ends a pending approval the requester stopped waiting for and
// returns the final row: if an answer got in first, it stands.
func (l *Ledger) close(ctx context.Context, id, state, by string) (Approval, error) {
	_, err := l.db.ExecContext(ctx, `UPDATE policy_approvals SET state = ?, decided = ?, decided_by = ?
		WHERE id = ? AND state = 'pending'`, state, ms(store.Now()), by, id)
	if err != nil {
		return Approval{}, fmt.Errorf("close approval %s: %w", id, err)
	}
	return l.Approval(ctx, id)
}
