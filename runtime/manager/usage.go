package manager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Usage accounting: Account, called periodically by smolvm serve, adds
// to hourly rows what each running sandbox used since its last mark:
// time running, CPU (the backend's counter, so a paused sandbox accrues
// none), memory limit times time, and each tenant's snapshot bytes times
// time. Pause, resume and stop account at the moment they happen, so a
// paused sandbox accrues no running time either. Marks and rows are in
// the state database: a restarted server carries on from them.

var usageSchema = []string{
	`CREATE TABLE usage (
		hour INTEGER NOT NULL,
		tenant TEXT NOT NULL,
		sandbox TEXT NOT NULL,
		sandbox_ms INTEGER NOT NULL DEFAULT 0,
		cpu_ns INTEGER NOT NULL DEFAULT 0,
		mem_gib_ms REAL NOT NULL DEFAULT 0,
		snap_gib_ms REAL NOT NULL DEFAULT 0,
		PRIMARY KEY (hour, tenant, sandbox)
	)`,
	// The last accounted moment of a sandbox (and its CPU counter then),
	// or of a tenant's snapshots ("snapshots:" + tenant).
	`CREATE TABLE usage_marks (
		id TEXT PRIMARY KEY,
		at INTEGER NOT NULL,
		cpu_ns INTEGER NOT NULL DEFAULT 0
	)`,
}

const gib = float64(1 << 30)

// mark reads id's mark; ok is false if it has none.
func (m *Manager) mark(ctx context.Context, id string) (at time.Time, cpu int64, ok bool, err error) {
	var ms int64
	err = m.st.DB().QueryRowContext(ctx, `SELECT at, cpu_ns FROM usage_marks WHERE id = ?`, id).Scan(&ms, &cpu)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, 0, false, nil
	}
	return time.UnixMilli(ms), cpu, err == nil, err
}

func (m *Manager) setMark(ctx context.Context, db execer, id string, at time.Time, cpu int64) error {
	_, err := db.ExecContext(ctx, `INSERT INTO usage_marks(id, at, cpu_ns) VALUES(?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET at = excluded.at, cpu_ns = excluded.cpu_ns`, id, at.UnixMilli(), cpu)
	return err
}

// addUsage adds to the row of at's hour.
func addUsage(ctx context.Context, db execer, at time.Time, owner, sb string, ms, cpu int64, memGiBms, snapGiBms float64) error {
	hour := at.UTC().Truncate(time.Hour).Unix()
	_, err := db.ExecContext(ctx, `INSERT INTO usage(hour, tenant, sandbox, sandbox_ms, cpu_ns, mem_gib_ms, snap_gib_ms) VALUES(?,?,?,?,?,?,?)
		ON CONFLICT(hour, tenant, sandbox) DO UPDATE SET sandbox_ms = sandbox_ms + excluded.sandbox_ms, cpu_ns = cpu_ns + excluded.cpu_ns,
		mem_gib_ms = mem_gib_ms + excluded.mem_gib_ms, snap_gib_ms = snap_gib_ms + excluded.snap_gib_ms`,
		hour, owner, sb, ms, cpu, memGiBms, snapGiBms)
	return err
}

// accrue accounts r up to now: if it ran since its mark, the time, CPU
// and memory since then; either way its mark moves to now. A sandbox
// seen for the first time ran since it started.
func (m *Manager) accrue(ctx context.Context, r *record, running bool, now time.Time) error {
	at, cpuMark, ok, err := m.mark(ctx, r.ID)
	if err != nil {
		return err
	}
	if !ok && r.StartedAt != nil {
		at = *r.StartedAt
	}
	var cpu int64
	if r.be != nil {
		if st, err := r.be.Stats(ctx, &r.spec); err == nil {
			cpu = st.CPUNanos
		} else if running {
			cpu = cpuMark // counter unreadable now: accrue no CPU, keep the mark
		}
	}
	return m.st.Tx(ctx, func(tx *sql.Tx) error {
		if running && !at.IsZero() && now.After(at) {
			ms := now.Sub(at).Milliseconds()
			dcpu := cpu - cpuMark
			if dcpu < 0 {
				dcpu = cpu // the counter restarted with the sandbox
			}
			mem := float64(r.Config.Limits.Memory) / gib * float64(ms)
			if err := addUsage(ctx, tx, now, r.Tenant, r.ID, ms, dcpu, mem, 0); err != nil {
				return err
			}
		}
		return m.setMark(ctx, tx, r.ID, now, cpu)
	})
}

// Account brings every sandbox's and tenant's usage up to now. smolvm
// serve calls it every few seconds; the error is the first one met.
func (m *Manager) Account(ctx context.Context) error {
	now := time.Now()
	rs, err := m.listRecords(ctx, "", true)
	if err != nil {
		return fmt.Errorf("account: %w", err)
	}
	var errs []error
	for _, r := range rs {
		if r.be == nil {
			continue
		}
		if err := m.reconcile(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.accrue(ctx, r, r.State == sandbox.StateRunning, now); err != nil {
			errs = append(errs, err)
		}
	}
	rows, err := m.st.DB().QueryContext(ctx, `SELECT tenant, SUM(size) FROM snapshots GROUP BY tenant`)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	held := map[string]int64{}
	for rows.Next() {
		var owner string
		var n int64
		if err := rows.Scan(&owner, &n); err == nil {
			held[owner] = n
		}
	}
	rows.Close()
	for owner, n := range held {
		id := "snapshots:" + owner
		at, _, ok, err := m.mark(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, m.st.Tx(ctx, func(tx *sql.Tx) error {
			if ok && now.After(at) {
				if err := addUsage(ctx, tx, now, owner, "", 0, 0, 0, float64(n)/gib*float64(now.Sub(at).Milliseconds())); err != nil {
					return err
				}
			}
			return m.setMark(ctx, tx, id, now, 0)
		}))
	}
	return errors.Join(errs...)
}

// Usage sums the usage recorded since (whole hours: the hour since falls
// in counts) of ctx's tenant, or of every tenant (unscoped; only one if
// only is set), by tenant, or by tenant and sandbox with bySandbox.
func (m *Manager) Usage(ctx context.Context, since time.Time, only string, bySandbox bool) ([]sandbox.Usage, error) {
	owner, scoped := tenant.Of(ctx)
	if scoped {
		only = owner
	}
	group := "tenant"
	if bySandbox {
		group = "tenant, sandbox"
	}
	rows, err := m.st.DB().QueryContext(ctx, `SELECT tenant, `+map[bool]string{true: "sandbox", false: "''"}[bySandbox]+`,
		SUM(sandbox_ms), SUM(cpu_ns), SUM(mem_gib_ms), SUM(snap_gib_ms) FROM usage
		WHERE hour >= ? AND (? = 0 OR tenant = ?) GROUP BY `+group+` ORDER BY `+group,
		since.UTC().Truncate(time.Hour).Unix(), scoped || only != "", only)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	defer rows.Close()
	out := []sandbox.Usage{}
	for rows.Next() {
		var (
			u       sandbox.Usage
			ms, cpu int64
			mem, sn float64
		)
		if err := rows.Scan(&u.Tenant, &u.Sandbox, &ms, &cpu, &mem, &sn); err != nil {
			return nil, err
		}
		u.SandboxSeconds, u.CPUSeconds = float64(ms)/1e3, float64(cpu)/1e9
		u.MemoryGiBSeconds, u.SnapshotGiBHours = mem/1e3, sn/3.6e6
		out = append(out, u)
	}
	return out, rows.Err()
}
