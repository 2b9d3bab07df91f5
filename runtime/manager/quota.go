package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// quotas admits new sandboxes, pools and snapshots under their tenant's
// quota (runtime/tenant). Admission counts what the database holds plus
// what admitted requests are still making, under one lock, so that
// concurrent creates cannot together pass a limit each fits alone.
type quotas struct {
	mu sync.Mutex
	// pending is what admitted, unfinished requests will add, by tenant.
	pending map[string]demand
	// creates holds each tenant's admission times of the last minute.
	creates map[string][]time.Time
}

// demand is what sandboxes hold against a quota.
type demand struct {
	n      int
	memory int64
	cpus   float64
}

func (d demand) plus(e demand) demand {
	return demand{n: d.n + e.n, memory: d.memory + e.memory, cpus: d.cpus + e.cpus}
}

// live is the states that hold resources (all but stopped and expired).
const live = `('creating','created','running','paused')`

// held sums what owner's live sandboxes (pool members included) hold.
func (m *Manager) held(ctx context.Context, owner string) (demand, error) {
	rows, err := m.st.DB().QueryContext(ctx, `SELECT config FROM sandboxes WHERE tenant = ? AND state IN `+live, owner)
	if err != nil {
		return demand{}, err
	}
	defer rows.Close()
	var d demand
	for rows.Next() {
		var cfg string
		if err := rows.Scan(&cfg); err != nil {
			return demand{}, err
		}
		var c sandbox.Config
		if err := json.Unmarshal([]byte(cfg), &c); err != nil {
			return demand{}, err
		}
		d = d.plus(demandOf(1, c.Limits))
	}
	return d, rows.Err()
}

// demandOf is what n sandboxes with limits l hold; zero limits are the
// defaults a sandbox gets.
func demandOf(n int, l sandbox.Limits) demand {
	if l.Memory == 0 {
		l.Memory = sandbox.DefaultMemory
	}
	if l.CPUs == 0 {
		l.CPUs = sandbox.DefaultCPUs
	}
	return demand{n: n, memory: int64(n) * l.Memory, cpus: float64(n) * l.CPUs}
}

// quotaOf returns the quota of ctx's tenant, and false for an unscoped
// ctx, which has none.
func (m *Manager) quotaOf(ctx context.Context) (string, sandbox.Quota, bool, error) {
	owner, scoped := tenant.Of(ctx)
	if !scoped {
		return "", sandbox.Quota{}, false, nil
	}
	q, err := m.tenants.Quota(ctx, owner)
	if err != nil {
		return owner, q, true, fmt.Errorf("%w: %v", tenant.ErrQuota, err)
	}
	return owner, q, true, nil
}

// rate counts n creates against ctx's tenant's creates per minute. They
// are counted under no limit too, so that one set later applies to the
// minute before.
func (m *Manager) rate(ctx context.Context, n int) error {
	owner, q, scoped, err := m.quotaOf(ctx)
	if !scoped || err != nil {
		return err
	}
	m.quota.mu.Lock()
	defer m.quota.mu.Unlock()
	now := time.Now()
	var recent []time.Time
	for _, t := range m.quota.creates[owner] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	if q.CreatesPerMinute > 0 && len(recent)+n > q.CreatesPerMinute {
		m.quota.creates[owner] = recent
		return fmt.Errorf("%w: tenant %q: %d creates per minute (%d in the last minute, %d more asked)", tenant.ErrQuota, owner, q.CreatesPerMinute, len(recent), n)
	}
	for range n {
		recent = append(recent, now)
	}
	m.quota.creates[owner] = recent
	return nil
}

// admit reserves room for n new sandboxes with limits l under ctx's
// tenant's quota. The reservation holds until release is called (any
// number of times), once the sandboxes' records count instead, or they
// failed.
func (m *Manager) admit(ctx context.Context, n int, l sandbox.Limits) (release func(), err error) {
	owner, q, scoped, err := m.quotaOf(ctx)
	if !scoped || err != nil {
		return func() {}, err
	}
	want := demandOf(n, l)
	m.quota.mu.Lock()
	defer m.quota.mu.Unlock()
	have, err := m.held(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("quota of %s: %w", owner, err)
	}
	have = have.plus(m.quota.pending[owner])
	switch {
	case q.Sandboxes > 0 && have.n+want.n > q.Sandboxes:
		return nil, fmt.Errorf("%w: tenant %q: %d concurrent sandboxes (%d held, %d more asked)", tenant.ErrQuota, owner, q.Sandboxes, have.n, want.n)
	case q.Memory > 0 && have.memory+want.memory > q.Memory:
		return nil, fmt.Errorf("%w: tenant %q: %s of memory (%s held, %s more asked)", tenant.ErrQuota, owner,
			units.FormatBytes(q.Memory), units.FormatBytes(have.memory), units.FormatBytes(want.memory))
	case q.CPUs > 0 && have.cpus+want.cpus > q.CPUs+1e-9:
		return nil, fmt.Errorf("%w: tenant %q: %g vCPUs (%g held, %g more asked)", tenant.ErrQuota, owner, q.CPUs, have.cpus, want.cpus)
	}
	m.quota.pending[owner] = m.quota.pending[owner].plus(want)
	var once sync.Once
	return func() {
		once.Do(func() {
			m.quota.mu.Lock()
			defer m.quota.mu.Unlock()
			m.quota.pending[owner] = m.quota.pending[owner].plus(demand{n: -want.n, memory: -want.memory, cpus: -want.cpus})
		})
	}, nil
}

// admitPool checks ctx's tenant's quota of pools.
func (m *Manager) admitPool(ctx context.Context) error {
	owner, q, scoped, err := m.quotaOf(ctx)
	if !scoped || err != nil || q.Pools == 0 {
		return err
	}
	var n int
	if err := m.st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM pools WHERE tenant = ?`, owner).Scan(&n); err != nil {
		return fmt.Errorf("quota of %s: %w", owner, err)
	}
	if n >= q.Pools {
		return fmt.Errorf("%w: tenant %q: %d pools (%d held)", tenant.ErrQuota, owner, q.Pools, n)
	}
	return nil
}

// admitSnapshot checks ctx's tenant's quota of snapshot bytes: a
// checkpoint is refused once its snapshots hold the limit (its own size
// is known only once written).
func (m *Manager) admitSnapshot(ctx context.Context) error {
	owner, q, scoped, err := m.quotaOf(ctx)
	if !scoped || err != nil || q.SnapshotBytes == 0 {
		return err
	}
	used, err := m.snaps.Bytes(ctx, owner)
	if err != nil {
		return fmt.Errorf("quota of %s: %w", owner, err)
	}
	if used >= q.SnapshotBytes {
		return fmt.Errorf("%w: tenant %q: %s of snapshots (%s held)", tenant.ErrQuota, owner, units.FormatBytes(q.SnapshotBytes), units.FormatBytes(used))
	}
	return nil
}

// Tenants returns the data dir's tenants, their keys and quotas.
func (m *Manager) Tenants() sandbox.Tenants { return m.tenants }
