package manager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Lifetimes are enforced by the agent inside each sandbox (its deadline
// and idle timeout), so they hold with no daemon running and survive a
// restart of whatever manages the sandbox: the deadline is in the agent
// and ExpiresAt in the record. The Manager turns an agent's "expired"
// exit into StateExpired, and Reap removes expired sandboxes after a
// grace period, leaving a tombstone so that a later lookup still says the
// sandbox expired, and when.

// tombstoneRetention is how long a removed sandbox's tombstone is kept.
const tombstoneRetention = 30 * 24 * time.Hour

func expiredError(r *record) error {
	sb := r.Sandbox
	at := r.CreatedAt
	if r.FinishedAt != nil {
		at = *r.FinishedAt
	}
	return &sandbox.ExpiredError{ID: r.ID, Name: r.Name, At: at, Reason: r.Reason, Sandbox: &sb}
}

// markExpired turns a sandbox the agent stopped for its lifetime into an
// expired one, dated when the agent acted rather than when we noticed.
func markExpired(r *record, exit *backend.Exit) bool {
	switch exit.Reason {
	case guest.ReasonExpired:
		r.Reason = fmt.Sprintf("time to live (%s) ended", r.Config.TTL)
		if r.ExpiresAt != nil {
			r.FinishedAt = r.ExpiresAt
		}
	case guest.ReasonIdle:
		r.Reason = fmt.Sprintf("idle for %s", r.Config.IdleTimeout)
		t := exit.At.UTC().Truncate(time.Millisecond)
		r.FinishedAt = &t
	default:
		return false
	}
	r.State = sandbox.StateExpired
	return true
}

// setDeadline sets the expiry ttl after now (none for 0). The agent
// enforces it unless the TTL's end pauses, which the Manager does.
func (r *record) setDeadline(now time.Time, ttl time.Duration) {
	r.ExpiresAt, r.spec.Deadline = nil, nil
	if ttl > 0 {
		exp := now.Add(ttl)
		r.ExpiresAt = &exp
		if r.Config.OnExpiry != sandbox.ExpiryPause {
			r.spec.Deadline = &exp
		}
	}
}

// afterTransition keeps the clock right across pause and resume: a
// paused sandbox does not expire, and a resumed one gets its full TTL
// again (its agent's old deadline may have passed while it was frozen).
func (m *Manager) afterTransition(ctx context.Context, r *record) error {
	switch r.State {
	case sandbox.StatePaused:
		r.ExpiresAt = nil
	case sandbox.StateRunning:
		r.setDeadline(store.Now(), r.Config.TTL)
		if r.Reason == reasonPaused {
			r.Reason = ""
		}
		return r.be.Guest(&r.spec).SetDeadline(ctx, r.spec.Deadline)
	}
	return nil
}

// reasonPaused marks a sandbox paused by the end of its TTL.
const reasonPaused = "time to live ended: paused"

// expirePause pauses a sandbox whose TTL ended with OnExpiry pause.
func (m *Manager) expirePause(ctx context.Context, id string) error {
	r, unlock, err := m.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	sn, err := snapshotter(r.be, "pause")
	if err != nil {
		return err
	}
	if r.State != sandbox.StateRunning || r.ExpiresAt == nil || time.Now().Before(*r.ExpiresAt) {
		return nil // resumed, extended or stopped meanwhile
	}
	if err := sn.Pause(ctx, &r.spec); err != nil {
		return fmt.Errorf("pause %s at the end of its TTL: %w", r.Name, err)
	}
	r.State, r.Reason, r.ExpiresAt = sandbox.StatePaused, reasonPaused, nil
	if err := update(ctx, m.st, r); err != nil {
		return err
	}
	m.publish("paused", &r.Sandbox)
	return nil
}

// SetTTL sets a sandbox's time to live to ttl from now (0: none), for this
// run and every later start. Extending a running sandbox moves the
// deadline its agent enforces.
func (m *Manager) SetTTL(ctx context.Context, ref string, ttl time.Duration) (*sandbox.Sandbox, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("%w: time to live %s: must not be negative", sandbox.ErrInvalid, ttl)
	}
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.State == sandbox.StateExpired {
		return nil, expiredError(r)
	}
	r.Config.TTL = ttl
	// A paused sandbox gets its deadline when resumed.
	if r.State == sandbox.StateRunning {
		r.setDeadline(store.Now(), ttl)
		if err := r.be.Guest(&r.spec).SetDeadline(ctx, r.spec.Deadline); err != nil {
			return nil, fmt.Errorf("set time to live of %s: %w", r.Name, err)
		}
	}
	if err := update(ctx, m.st, r); err != nil {
		return nil, err
	}
	m.publish("ttl", &r.Sandbox)
	return &r.Sandbox, nil
}

// Reap removes sandboxes that have been expired for longer than grace,
// leaving tombstones, and forgets tombstones past their retention. It
// returns the names it removed. A server runs it periodically; smolvm gc
// runs it once.
func (m *Manager) Reap(ctx context.Context, grace time.Duration) ([]string, error) {
	rs, err := m.listRecords(ctx, "", false) // pool members wait, unlisted, with no TTL
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var removed []string
	var errs []error
	for _, r := range rs {
		if r.State == sandbox.StateRunning || r.State == sandbox.StatePaused {
			// Notice sandboxes that expired since the last look.
			if err := m.reconcile(ctx, r); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if r.State == sandbox.StateRunning && r.Config.OnExpiry == sandbox.ExpiryPause && r.ExpiresAt != nil && now.After(*r.ExpiresAt) {
			errs = append(errs, m.expirePause(ctx, r.ID))
			continue
		}
		if r.State != sandbox.StateExpired || r.FinishedAt == nil || now.Sub(*r.FinishedAt) < grace {
			continue
		}
		if err := m.Remove(ctx, r.ID, true); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.Name)
	}
	_, err = m.st.DB().ExecContext(ctx, `DELETE FROM sandbox_tombstones WHERE removed_at < ?`, now.Add(-tombstoneRetention).UnixMilli())
	errs = append(errs, err)
	return removed, errors.Join(errs...)
}

// bury records that r was removed, so that lookups can tell a sandbox
// that existed from one that never did.
func bury(ctx context.Context, db execer, r *record) error {
	ended := r.CreatedAt
	if r.FinishedAt != nil {
		ended = *r.FinishedAt
	}
	_, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO sandbox_tombstones (id, name, expired, reason, ended_at, removed_at, tenant) VALUES (?,?,?,?,?,?,?)`,
		r.ID, r.Name, r.State == sandbox.StateExpired, r.Reason, ended.UnixMilli(), store.Now().UnixMilli(), r.Tenant)
	return err
}

// buried reports whether sandbox id was removed here: it has a tombstone.
// An error reads as no.
func (m *Manager) buried(ctx context.Context, id string) bool {
	var n int
	err := m.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM sandbox_tombstones WHERE id=?`, id).Scan(&n)
	return err == nil && n > 0
}

// notFound explains a failed lookup of ref: expired (and when), removed
// (and when), or never existed. A scoped ctx reads only its tenant's
// tombstones.
func notFound(ctx context.Context, st *store.Store, ref string) error {
	owner, scoped := tenant.Of(ctx)
	var (
		id, name, reason string
		expired          bool
		ended, removed   int64
	)
	err := st.DB().QueryRowContext(ctx, `SELECT id, name, expired, reason, ended_at, removed_at FROM sandbox_tombstones
		WHERE (name=? OR id=?) AND (NOT ? OR tenant=?) ORDER BY removed_at DESC LIMIT 1`, ref, ref, scoped, owner).Scan(&id, &name, &expired, &reason, &ended, &removed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %q never existed", sandbox.ErrNotFound, ref)
	case err != nil:
		return err
	case expired:
		return &sandbox.ExpiredError{ID: id, Name: name, At: time.UnixMilli(ended).UTC(), Reason: reason}
	}
	return fmt.Errorf("%w: %q was removed at %s", sandbox.ErrNotFound, ref, time.UnixMilli(removed).UTC().Format(time.RFC3339))
}
