package manager

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// CreatePool records a pool. It starts empty: FillPool fills it.
func (m *Manager) CreatePool(ctx context.Context, o sandbox.PoolOptions) (*sandbox.Pool, error) {
	ref, err := m.imageRef(ctx, o.Image)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	o.Image = ref
	if o.Name == "" {
		o.Name = o.Image
	}
	if err := names.Check(names.Pool, o.Name); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if o.Size < 0 || o.Size > sandbox.MaxPoolSize || o.Targets < 0 || o.Targets > sandbox.MaxPoolSize || o.Hot < 0 || o.Hot > sandbox.MaxPoolSize ||
		o.Size+o.Targets+o.Hot == 0 {
		return nil, fmt.Errorf("create pool %s: %w: --size %d --targets %d --hot %d: each must be between 0 and %d, and one above 0",
			o.Name, sandbox.ErrInvalid, o.Size, o.Targets, o.Hot, sandbox.MaxPoolSize)
	}
	if (o.From != "") != (o.Hot > 0) || (o.From != "" && o.Size+o.Targets > 0) {
		return nil, fmt.Errorf("create pool %s: %w: --hot N goes with --from SNAPSHOT, and such a pool holds only hot copies (no --size, --targets)",
			o.Name, sandbox.ErrInvalid)
	}
	if o.MemoryBudget < 0 {
		return nil, fmt.Errorf("create pool %s: %w: --memory-budget must not be negative", o.Name, sandbox.ErrInvalid)
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = sandbox.DefaultMemoryBudget
	}
	cfg := sandbox.Config{Limits: o.Limits}
	if err := validate(&cfg); err != nil {
		return nil, fmt.Errorf("create pool %s: %w", o.Name, err)
	}
	be, err := m.newBackend(o.Backend)
	if err != nil {
		return nil, fmt.Errorf("create pool %s: %w", o.Name, err)
	}
	p := &sandbox.Pool{Name: o.Name, Backend: be.Name(), Image: o.Image, Size: o.Size, Targets: o.Targets, Hot: o.Hot, MemoryBudget: o.MemoryBudget, Limits: cfg.Limits, CreatedAt: store.Now(), Tenant: tenant.Owner(ctx)}
	if o.From != "" {
		// The copies are the snapshot's: its image (by ID), limits and
		// backend.
		snap, meta, err := m.snapshotMeta(ctx, o.From)
		if err != nil {
			return nil, fmt.Errorf("create pool %s: %w", o.Name, err)
		}
		p.Snapshot, p.Image, p.Limits = snap.ID, snap.ImageID, meta.Config.Limits
		if meta.Backend != "" {
			if o.Backend != "" && o.Backend != meta.Backend {
				return nil, fmt.Errorf("create pool %s: %w: snapshot %s is of backend %s, not %s", o.Name, sandbox.ErrInvalid, o.From, meta.Backend, o.Backend)
			}
			p.Backend = meta.Backend
		}
	}
	if _, err := m.images.Get(ctx, p.Image); err != nil {
		return nil, fmt.Errorf("create pool %s: image %w", o.Name, err)
	}
	if err := m.admitPool(ctx); err != nil {
		return nil, fmt.Errorf("create pool %s: %w", o.Name, err)
	}
	limits, err := json.Marshal(p.Limits)
	if err != nil {
		return nil, err
	}
	_, err = m.st.DB().ExecContext(ctx, `INSERT INTO pools(name, image, size, targets, memory_budget, config, created_at, backend, snapshot, hot, tenant) VALUES(?,?,?,?,?,?,?,?,?,?,?)`,
		p.Name, p.Image, p.Size, p.Targets, p.MemoryBudget, string(limits), p.CreatedAt.UnixMilli(), p.Backend, p.Snapshot, p.Hot, p.Tenant)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return nil, fmt.Errorf("create pool: %w: pool %q exists", sandbox.ErrNameInUse, p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("create pool %s: %w", p.Name, err)
	}
	return p, nil
}

// loadPool reads a pool's record, without its members: only a pool of
// ctx's tenant (any, unscoped); another's is not found.
func (m *Manager) loadPool(ctx context.Context, name string) (*sandbox.Pool, error) {
	if err := names.Check(names.Pool, name); err != nil {
		return nil, err
	}
	var (
		p       sandbox.Pool
		limits  string
		created int64
	)
	owner, scoped := tenant.Of(ctx)
	err := m.st.DB().QueryRowContext(ctx, `SELECT name, image, size, targets, memory_budget, config, created_at, backend, snapshot, hot, tenant FROM pools WHERE name = ? AND (NOT ? OR tenant = ?)`, name, scoped, owner).
		Scan(&p.Name, &p.Image, &p.Size, &p.Targets, &p.MemoryBudget, &limits, &created, &p.Backend, &p.Snapshot, &p.Hot, &p.Tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", sandbox.ErrPoolNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	if err := json.Unmarshal([]byte(limits), &p.Limits); err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	p.CreatedAt = time.UnixMilli(created).UTC()
	if p.Backend == "" {
		// Made before pools recorded their backend.
		p.Backend = m.backends.Default().Name()
	}
	return &p, nil
}

// Pool returns a pool with its ready count and memory use. Members that
// died are removed on the way.
func (m *Manager) Pool(ctx context.Context, name string) (*sandbox.Pool, error) {
	p, err := m.loadPool(ctx, name)
	if err != nil {
		return nil, err
	}
	rs, err := m.listRecords(ctx, name, false)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if m.locked(r.ID) || r.be == nil {
			continue // being created or claimed, or not this manager's to judge
		}
		if err := m.reconcile(ctx, r); err != nil {
			return nil, err
		}
		switch r.State {
		case sandbox.StateRunning:
			p.Ready++
		case sandbox.StateCreated:
			p.TargetsReady++
		case sandbox.StatePaused:
			p.HotReady++
		default:
			m.discard(ctx, r)
			continue
		}
		if st, err := r.be.Stats(ctx, &r.spec); err == nil {
			p.MemoryUsed += st.MemoryBytes
		}
	}
	return p, nil
}

// poolNames lists the names of ctx's tenant's pools.
func (m *Manager) poolNames(ctx context.Context) ([]string, error) {
	owner, scoped := tenant.Of(ctx)
	return m.queryPools(ctx, `SELECT name FROM pools WHERE NOT ? OR tenant = ? ORDER BY name`, scoped, owner)
}

// hotPools lists the pools of ctx's owner that hold hot copies of
// snapshot id. Only the owner's: a copy belongs to its pool's tenant, so
// the admin's hot pool of a tenant's snapshot serves the admin alone.
func (m *Manager) hotPools(ctx context.Context, id string) ([]string, error) {
	return m.queryPools(ctx, `SELECT name FROM pools WHERE snapshot = ? AND hot > 0 AND tenant = ? ORDER BY name`, id, tenant.Owner(ctx))
}

func (m *Manager) queryPools(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := m.st.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// Pools lists every pool.
func (m *Manager) Pools(ctx context.Context) ([]*sandbox.Pool, error) {
	names, err := m.poolNames(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Pool, 0, len(names))
	for _, n := range names {
		p, err := m.Pool(ctx, n)
		if errors.Is(err, sandbox.ErrPoolNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// RemovePool removes a pool and the sandboxes waiting in it. Sandboxes
// already taken from it are not affected.
func (m *Manager) RemovePool(ctx context.Context, name string) error {
	if err := names.Check(names.Pool, name); err != nil {
		return fmt.Errorf("remove pool: %w", err)
	}
	owner, scoped := tenant.Of(ctx)
	res, err := m.st.DB().ExecContext(ctx, `DELETE FROM pools WHERE name = ? AND (NOT ? OR tenant = ?)`, name, scoped, owner)
	if err != nil {
		return fmt.Errorf("remove pool %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("remove pool: %w: %q", sandbox.ErrPoolNotFound, name)
	}
	// A filler at work sees the pool gone and removes what it was making.
	return m.removeMembers(ctx, name)
}

func (m *Manager) removeMembers(ctx context.Context, pool string) error {
	rs, err := listRecords(ctx, m.st, pool, false)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rs {
		if err := m.Remove(ctx, r.ID, true); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FillPool starts sandboxes until the pool holds Size of them, then
// creates restore targets until it holds Targets, or stops where one more
// would go over its memory budget (ErrPoolBudget). Only one filler works
// on a pool at a time; another returns at once, leaving what it was
// started for to the one at work, which looks at the pool once more after
// it lets the lock go (a claim made just before it did would otherwise
// wait for the next claim's refill). It returns how many sandboxes it made.
func (m *Manager) FillPool(ctx context.Context, name string) (int, error) {
	// The name becomes a file name: check it before anything else.
	if err := names.Check(names.Pool, name); err != nil {
		return 0, fmt.Errorf("fill pool: %w", err)
	}
	made := 0
	for {
		n, ok, err := m.fillLocked(ctx, name)
		made += n
		if err != nil || !ok {
			return made, err
		}
		p, err := m.Pool(ctx, name)
		if err != nil {
			return made, fmt.Errorf("fill pool: %w", err)
		}
		if p.Ready >= p.Size && p.TargetsReady >= p.Targets && p.HotReady >= p.Hot {
			return made, nil
		}
	}
}

// fillLocked is one pass of FillPool under the pool's lock: how many
// sandboxes it made, and false if another filler held the lock.
func (m *Manager) fillLocked(ctx context.Context, name string) (made int, ok bool, err error) {
	f, err := m.openLock("pool-" + name)
	if err != nil {
		return 0, false, fmt.Errorf("fill pool %s: %w", name, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return 0, false, nil // another filler is at work
	}
	for {
		p, err := m.Pool(ctx, name)
		if err != nil {
			return made, true, fmt.Errorf("fill pool: %w", err)
		}
		start := p.Ready < p.Size
		if !start && p.TargetsReady >= p.Targets && p.HotReady >= p.Hot {
			return made, true, nil
		}
		// Judge the next sandbox by what the waiting ones use; idle hot
		// copies count with their restored memory.
		next := int64(64 << 20)
		if n := p.Ready + p.TargetsReady + p.HotReady; n > 0 {
			next = p.MemoryUsed / int64(n)
		}
		if p.MemoryUsed+next > p.MemoryBudget {
			return made, true, fmt.Errorf("fill pool %s: %w: %d of %d ready, %d of %d targets and %d of %d hot copies use %s of %s; "+
				"one more would need about %s (raise --memory-budget)", name, sandbox.ErrPoolBudget,
				p.Ready, p.Size, p.TargetsReady, p.Targets, p.HotReady, p.Hot, units.FormatBytes(p.MemoryUsed), units.FormatBytes(p.MemoryBudget),
				units.FormatBytes(next))
		}
		var sb *sandbox.Sandbox
		if p.Snapshot != "" {
			sb, err = m.makeHot(tenant.With(ctx, p.Tenant), p)
		} else {
			// Members belong to the pool's tenant, whoever fills it.
			sb, err = m.create(tenant.With(ctx, p.Tenant), sandbox.CreateOptions{Image: p.Image, Backend: p.Backend, Config: sandbox.Config{Limits: p.Limits}, Start: start}, name, "")
		}
		if err != nil {
			return made, true, fmt.Errorf("fill pool %s: %w", name, err)
		}
		if _, err := m.loadPool(ctx, name); errors.Is(err, sandbox.ErrPoolNotFound) {
			m.Remove(context.WithoutCancel(ctx), sb.ID, true)
			return made, true, fmt.Errorf("fill pool: %w", err)
		}
		made++
	}
}

// claim makes a sandbox out of one waiting in o.Pool. An empty pool falls
// back to a cold create with the pool's image and limits. Either way the
// pool is then refilled through the manager's Refill hook.
func (m *Manager) claim(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	p, err := m.loadPool(ctx, o.Pool)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	switch {
	case o.Image != "" && o.Image != p.Image:
		return nil, fmt.Errorf("create: %w: pool %s holds image %s, not %s", sandbox.ErrInvalid, p.Name, p.Image, o.Image)
	case o.Backend != "" && o.Backend != p.Backend:
		return nil, fmt.Errorf("create: %w: pool %s runs on backend %s, not %s", sandbox.ErrInvalid, p.Name, p.Backend, o.Backend)
	case len(o.Config.Cmd) > 0:
		return nil, fmt.Errorf("create: %w: a pooled sandbox runs no main command; run commands with exec", sandbox.ErrInvalid)
	case o.Config.Network.Enabled():
		// Pool members boot before anyone asks, with --net none; a network
		// is set up at create, so it cannot be given to one afterwards.
		return nil, fmt.Errorf("create: %w: pooled sandboxes have no network; drop --pool to use --net", sandbox.ErrInvalid)
	case len(o.Config.Volumes) > 0:
		return nil, fmt.Errorf("create: %w: pooled sandboxes mount no volumes; drop --pool to use --volume", sandbox.ErrInvalid)
	case !limitsFit(o.Config.Limits, p.Limits):
		return nil, fmt.Errorf("create: %w: pool %s has limits %+v; leave limits unset or equal", sandbox.ErrInvalid, p.Name, p.Limits)
	}
	cfg := o.Config
	cfg.Limits = p.Limits
	if err := m.checkConfig(&cfg); err != nil {
		return nil, err
	}
	// What a trust policy allows is a ceiling: a member booted without a
	// network stays without one.
	cfg.Network = nil
	if o.Name != "" {
		if err := validName(o.Name); err != nil {
			return nil, err
		}
	}
	if m.refill != nil {
		defer m.refill(p.Name)
	}
	// A member may have died while it waited: try the next one.
	for range 3 {
		r, unlock, err := m.take(ctx, p.Name, o.Name, sandbox.StateRunning)
		if err != nil {
			return nil, fmt.Errorf("create from pool %s: %w", p.Name, err)
		}
		if r == nil {
			break // empty
		}
		sb, err := m.adopt(ctx, r, cfg)
		unlock()
		if err == nil {
			return sb, nil
		}
		m.discard(ctx, r)
	}
	return m.create(ctx, sandbox.CreateOptions{Name: o.Name, Image: p.Image, Backend: p.Backend, Config: cfg, Start: true}, "", "")
}

// limitsFit reports whether the limits asked for (zero: any) are the
// pool's.
func limitsFit(want, have sandbox.Limits) bool {
	return (want.CPUs == 0 || want.CPUs == have.CPUs) &&
		(want.Memory == 0 || want.Memory == have.Memory) &&
		(want.Pids == 0 || want.Pids == have.Pids) &&
		(want.Disk == 0 || want.Disk == have.Disk)
}

// take moves the oldest waiting member in state out of pool under name
// (kept if ""), in one transaction, so two claimers never get the same
// one. It returns nil if the pool has none. A restore target taken is a
// copy being made: it is recorded as creating, so that a crash before its
// restore ends leaves it to gc, as a crashed create.
func (m *Manager) take(ctx context.Context, pool, name string, state sandbox.State) (*record, func(), error) {
	var id string
	err := m.st.Tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT id FROM sandboxes WHERE pool = ? AND state = ? ORDER BY created_at LIMIT 1`, pool, state).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			id = ""
			return nil
		}
		if err != nil {
			return err
		}
		if name == "" {
			name = "sb-" + id
		}
		next := state
		if state == sandbox.StateCreated {
			next = sandbox.StateCreating
		}
		_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET pool = '', name = ?, state = ? WHERE id = ?`, name, next, id)
		return nameErr(&record{Sandbox: sandbox.Sandbox{Name: name}}, err)
	})
	if err != nil || id == "" {
		return nil, nil, err
	}
	unlock, err := m.lock(id)
	if err != nil {
		return nil, nil, err
	}
	r, err := m.lookup(ctx, id)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return r, unlock, nil
}

// adopt turns a taken member into the sandbox the user asked for: its
// config, hostname, environment and clock, handed to its running agent.
func (m *Manager) adopt(ctx context.Context, r *record, cfg sandbox.Config) (*sandbox.Sandbox, error) {
	if err := m.reconcile(ctx, r); err != nil {
		return nil, err
	}
	if r.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%s: %w: the pooled sandbox died", r.ID, sandbox.ErrNotRunning)
	}
	img, err := m.images.Get(ctx, r.ImageID)
	if err != nil {
		return nil, err
	}
	// The member booted as sb-<ID>; the agent renames it.
	if cfg.Hostname == "" {
		cfg.Hostname = hostnameFor(r.Name, r.ID)
	}
	r.Config, r.CreatedAt, r.Tenant = cfg, store.Now(), tenant.Owner(ctx)
	r.spec = m.specFor(r, img)
	startClock(r)
	id := guest.Identity{Env: r.spec.Env, MachineID: r.spec.MachineID, Hostname: r.spec.Hostname,
		Deadline: r.spec.Deadline, Dir: r.spec.WorkDir, User: r.spec.User}
	if err := r.be.Guest(&r.spec).SetIdentity(ctx, id); err != nil {
		return nil, fmt.Errorf("%s: hand over identity: %w", r.ID, err)
	}
	if err := update(ctx, m.st, r); err != nil {
		return nil, err
	}
	return &r.Sandbox, nil
}

// makeHot makes one hot copy for pool p: restored from its snapshot
// under a placeholder identity, then paused, waiting in the pool. A copy
// of a sandbox with a network gets its own before the restore, as any
// restored copy does (materialize), published ports included, and keeps
// it when claimed: its ID does not change. Its record carries snapshot,
// so SnapshotInUse refuses to remove that snapshot (naming the pool), and
// Restore claims a hot copy before anything else (claimHot).
func (m *Manager) makeHot(ctx context.Context, p *sandbox.Pool) (*sandbox.Sandbox, error) {
	snap, meta, err := m.snapshotMeta(ctx, p.Snapshot)
	if err != nil {
		return nil, err
	}
	be, sn, err := m.restorer(meta)
	if err != nil {
		return nil, err
	}
	img, err := m.images.Get(ctx, snap.ImageID)
	if err != nil {
		return nil, fmt.Errorf("image %s of the snapshot: %w", meta.Image, err)
	}
	r, unlock, err := m.freshCopy(ctx, "", meta.Image, img, meta.Config, be)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r.Snapshot, r.pool = snap.ID, p.Name
	if _, err := m.materialize(ctx, r, sn, false, func(ctx context.Context) (string, error) { return m.snaps.Verify(ctx, snap) }); err != nil {
		return nil, err
	}
	if w, ok := r.Config.Labels[sandbox.LabelWarm]; ok {
		if err := m.warm(ctx, r, w); err != nil {
			m.discard(ctx, r)
			return nil, fmt.Errorf("warm hot copy %s: %w", r.ID, err)
		}
	}
	if err := sn.Pause(ctx, &r.spec); err != nil {
		m.discard(ctx, r)
		return nil, fmt.Errorf("pause hot copy %s: %w", r.ID, err)
	}
	r.State = sandbox.StatePaused
	if err := update(ctx, m.st, r); err != nil {
		m.discard(ctx, r)
		return nil, err
	}
	return &r.Sandbox, nil
}

// warmTimeout bounds a hot copy's warm-up request (LabelWarm).
const warmTimeout = 30 * time.Second

// warm sends the GET a LabelWarm names to a hot copy and reads the answer:
// through its published port if the port is published, the way its users
// will come (the network helper and the sandbox's network stack warm
// too), otherwise through its agent. Any HTTP answer will do.
func (m *Manager) warm(ctx context.Context, r *record, endpoint string) error {
	port, path, err := sandbox.ParseWarm(endpoint)
	if err != nil {
		return err
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return r.be.Guest(&r.spec).DialPort(ctx, port)
	}
	if r.Config.Network.Enabled() {
		st, err := m.net.Status(ctx, r.ID)
		if err != nil {
			return err
		}
		for _, p := range st.Ports {
			if p.Port == port {
				addr := p.DialAddr()
				dial = func(ctx context.Context, nw, _ string) (net.Conn, error) { return m.DialPublished(ctx, nw, addr) }
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return err
}

// claimHot takes a hot copy of snap from a pool that holds them, resumes
// it and hands it its identity (name, hostname, environment, clock), the
// way a pooled sandbox is adopted. It returns nil if no hot pool of snap
// has one waiting.
func (m *Manager) claimHot(ctx context.Context, snap *sandbox.Snapshot, meta restoreMeta, name string) (*sandbox.Sandbox, error) {
	if name != "" {
		if err := validName(name); err != nil {
			return nil, err
		}
	}
	pools, err := m.hotPools(ctx, snap.ID)
	if err != nil {
		return nil, err
	}
	for _, pool := range pools {
		// A copy may have died while it waited: try the next one.
		for range 3 {
			r, unlock, err := m.take(ctx, pool, name, sandbox.StatePaused)
			if err != nil {
				return nil, err
			}
			if r == nil {
				break // empty
			}
			sb, err := m.wake(ctx, r, meta.Config)
			unlock()
			if err == nil {
				if m.refill != nil {
					m.refill(pool)
				}
				m.publish("restored", sb)
				return sb, nil
			}
			m.discard(ctx, r)
		}
	}
	return nil, nil
}

// wake resumes a taken hot copy and adopts it as the copy asked for.
func (m *Manager) wake(ctx context.Context, r *record, cfg sandbox.Config) (*sandbox.Sandbox, error) {
	sn, err := snapshotter(r.be, "restore")
	if err != nil {
		return nil, err
	}
	if err := sn.Resume(ctx, &r.spec); err != nil {
		return nil, fmt.Errorf("resume hot copy %s: %w", r.ID, err)
	}
	r.State = sandbox.StateRunning
	cfg.Hostname = ""
	return m.adopt(ctx, r, cfg)
}
