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
// none), memory limit times time, bytes sent (the network's counter),
// and each tenant's snapshot bytes times time. Pause, resume, stop and
// remove account at the moment they happen, so a paused sandbox accrues
// no running time either. Marks and rows are in the state database: a
// restarted server carries on from them. A sandbox's labels are kept
// beside its rows (usage_labels), so usage by label outlives it.

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
	`ALTER TABLE usage ADD COLUMN egress_bytes INTEGER NOT NULL DEFAULT 0`,
	// The sandbox's network Tx counter at its mark.
	`ALTER TABLE usage_marks ADD COLUMN tx_bytes INTEGER NOT NULL DEFAULT 0`,
	`CREATE TABLE usage_labels (
		sandbox TEXT NOT NULL,
		key TEXT NOT NULL,
		value TEXT NOT NULL,
		PRIMARY KEY (sandbox, key)
	)`,
}

const gib = float64(1 << 30)

// usageMark is the last accounted moment of a sandbox, with its
// counters then.
type usageMark struct {
	at  time.Time
	cpu int64 // CPU nanoseconds
	tx  int64 // bytes sent
}

// mark reads id's mark; ok is false if it has none.
func (m *Manager) mark(ctx context.Context, id string) (mk usageMark, ok bool, err error) {
	var ms int64
	err = m.st.DB().QueryRowContext(ctx, `SELECT at, cpu_ns, tx_bytes FROM usage_marks WHERE id = ?`, id).Scan(&ms, &mk.cpu, &mk.tx)
	if errors.Is(err, sql.ErrNoRows) {
		return usageMark{}, false, nil
	}
	mk.at = time.UnixMilli(ms)
	return mk, err == nil, err
}

func (m *Manager) setMark(ctx context.Context, db execer, id string, mk usageMark) error {
	_, err := db.ExecContext(ctx, `INSERT INTO usage_marks(id, at, cpu_ns, tx_bytes) VALUES(?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET at = excluded.at, cpu_ns = excluded.cpu_ns, tx_bytes = excluded.tx_bytes`, id, mk.at.UnixMilli(), mk.cpu, mk.tx)
	return err
}

// used is what to add to a usage row.
type used struct {
	ms, cpu, egress     int64
	memGiBms, snapGiBms float64
}

// addUsage adds u to the row of at's hour.
func addUsage(ctx context.Context, db execer, at time.Time, owner, sb string, u used) error {
	hour := at.UTC().Truncate(time.Hour).Unix()
	_, err := db.ExecContext(ctx, `INSERT INTO usage(hour, tenant, sandbox, sandbox_ms, cpu_ns, mem_gib_ms, snap_gib_ms, egress_bytes) VALUES(?,?,?,?,?,?,?,?)
		ON CONFLICT(hour, tenant, sandbox) DO UPDATE SET sandbox_ms = sandbox_ms + excluded.sandbox_ms, cpu_ns = cpu_ns + excluded.cpu_ns,
		mem_gib_ms = mem_gib_ms + excluded.mem_gib_ms, snap_gib_ms = snap_gib_ms + excluded.snap_gib_ms, egress_bytes = egress_bytes + excluded.egress_bytes`,
		hour, owner, sb, u.ms, u.cpu, u.memGiBms, u.snapGiBms, u.egress)
	return err
}

// delta is what a counter moved from mark to now; one that went back
// restarted (with the sandbox, or its network's table) and moved now.
func delta(now, mark int64) int64 {
	if now < mark {
		return now
	}
	return now - mark
}

// accrue accounts r up to now: if it ran since its mark, the time, CPU
// and memory since then; the bytes it sent since then; either way its
// mark moves to now. A sandbox seen for the first time ran since it
// started. Its labels are recorded beside its rows.
func (m *Manager) accrue(ctx context.Context, r *record, running bool, now time.Time) error {
	prev, ok, err := m.mark(ctx, r.ID)
	if err != nil {
		return err
	}
	if !ok && r.StartedAt != nil {
		prev.at = *r.StartedAt
	}
	next := usageMark{at: now, cpu: prev.cpu, tx: prev.tx} // unreadable counters: accrue nothing, keep the mark
	if r.be != nil {
		if st, err := r.be.Stats(ctx, &r.spec); err == nil {
			next.cpu = st.CPUNanos
		} else if !running {
			next.cpu = 0
		}
	}
	if r.Config.Network != nil && m.net != nil {
		if c, err := m.net.Counters(r.ID); err == nil {
			next.tx = int64(c.TxBytes)
		}
	}
	return m.st.Tx(ctx, func(tx *sql.Tx) error {
		// Every time, not just the first: a pool member gets its labels
		// when it is taken.
		for k, v := range r.Config.Labels {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO usage_labels(sandbox, key, value) VALUES(?, ?, ?)`, r.ID, k, v); err != nil {
				return err
			}
		}
		var u used
		if running && !prev.at.IsZero() && now.After(prev.at) {
			u.ms = now.Sub(prev.at).Milliseconds()
			u.cpu = delta(next.cpu, prev.cpu)
			u.memGiBms = float64(r.Config.Limits.Memory) / gib * float64(u.ms)
		}
		u.egress = delta(next.tx, prev.tx)
		if u != (used{}) {
			if err := addUsage(ctx, tx, now, r.Tenant, r.ID, u); err != nil {
				return err
			}
		}
		return m.setMark(ctx, tx, r.ID, next)
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
		prev, ok, err := m.mark(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, m.st.Tx(ctx, func(tx *sql.Tx) error {
			if ok && now.After(prev.at) {
				if err := addUsage(ctx, tx, now, owner, "", used{snapGiBms: float64(n) / gib * float64(now.Sub(prev.at).Milliseconds())}); err != nil {
					return err
				}
			}
			return m.setMark(ctx, tx, id, usageMark{at: now})
		}))
	}
	return errors.Join(errs...)
}

// Usage sums the usage recorded since (whole hours: the hour since falls
// in counts) of ctx's tenant, or of every tenant (unscoped; only one if
// only is set), by tenant, by tenant and sandbox (sandbox.UsageBySandbox)
// or by tenant and label (sandbox.UsageByLabel: one row per key=value, of
// the sandboxes that have it).
func (m *Manager) Usage(ctx context.Context, since time.Time, only, by string) ([]sandbox.Usage, error) {
	owner, scoped := tenant.Of(ctx)
	if scoped {
		only = owner
	}
	var sel, from, group string
	switch by {
	case "", sandbox.UsageByTenant:
		sel, from, group = `u.tenant, '', ''`, `usage u`, `u.tenant`
	case sandbox.UsageBySandbox:
		sel, from, group = `u.tenant, u.sandbox, ''`, `usage u`, `u.tenant, u.sandbox`
	case sandbox.UsageByLabel:
		sel, from, group = `u.tenant, '', l.key || '=' || l.value`, `usage u JOIN usage_labels l ON l.sandbox = u.sandbox`, `u.tenant, l.key, l.value`
	default:
		return nil, fmt.Errorf("usage: %w: by %q: want %s, %s or %s", sandbox.ErrInvalid, by, sandbox.UsageByTenant, sandbox.UsageBySandbox, sandbox.UsageByLabel)
	}
	rows, err := m.st.DB().QueryContext(ctx, `SELECT `+sel+`,
		SUM(u.sandbox_ms), SUM(u.cpu_ns), SUM(u.mem_gib_ms), SUM(u.snap_gib_ms), SUM(u.egress_bytes) FROM `+from+`
		WHERE u.hour >= ? AND (? = 0 OR u.tenant = ?) GROUP BY `+group+` ORDER BY `+group,
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
		if err := rows.Scan(&u.Tenant, &u.Sandbox, &u.Label, &ms, &cpu, &mem, &sn, &u.EgressBytes); err != nil {
			return nil, err
		}
		u.SandboxSeconds, u.CPUSeconds = float64(ms)/1e3, float64(cpu)/1e9
		u.MemoryGiBSeconds, u.SnapshotGiBHours = mem/1e3, sn/3.6e6
		out = append(out, u)
	}
	return out, rows.Err()
}
