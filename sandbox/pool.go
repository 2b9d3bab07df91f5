package sandbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/agent"
	"smolvm.dev/smolvm/backend"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/store"
)

// Pool keeps sandboxes of one image and one set of limits ready. Started
// members make creating a sandbox skip every cold step: the sandbox is
// already booted, and only takes on its new name and identity. Created,
// never started members (restore targets) do the same for restores and
// forks of sandboxes of that image and those limits: the copy is restored
// into one, which leaves only the restore itself.
type Pool struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	Size  int    `json:"size"`
	// Targets is how many restore targets to keep.
	Targets int `json:"targets"`
	// MemoryBudget caps the memory the waiting sandboxes use together.
	MemoryBudget int64          `json:"memory_budget"`
	Limits       backend.Limits `json:"limits"`
	CreatedAt    time.Time      `json:"created_at"`
	// Ready counts the started sandboxes waiting, TargetsReady the
	// restore targets; MemoryUsed is what they all use.
	Ready        int   `json:"ready"`
	TargetsReady int   `json:"targets_ready"`
	MemoryUsed   int64 `json:"memory_used"`
}

// Pool bounds.
const (
	MaxPoolSize         = 64
	DefaultMemoryBudget = 4 << 30
)

// Errors callers match with errors.Is.
var (
	ErrPoolNotFound = errors.New("no such pool")
	ErrPoolBudget   = errors.New("pool memory budget reached")
)

// PoolOptions describe a new pool.
type PoolOptions struct {
	Name         string // default: the image reference, if it is a valid name
	Image        string // default: the builtin host image
	Size         int    // started sandboxes
	Targets      int    // restore targets for restores and forks
	MemoryBudget int64  // 0: DefaultMemoryBudget
	Limits       backend.Limits
}

// CreatePool records a pool. It starts empty: FillPool fills it.
func (m *Manager) CreatePool(ctx context.Context, o PoolOptions) (*Pool, error) {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Name == "" {
		o.Name = o.Image
	}
	if err := names.Check(names.Pool, o.Name); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if o.Size < 0 || o.Size > MaxPoolSize || o.Targets < 0 || o.Targets > MaxPoolSize || o.Size+o.Targets == 0 {
		return nil, fmt.Errorf("create pool %s: %w: --size %d --targets %d: each must be between 0 and %d, and one above 0",
			o.Name, ErrInvalid, o.Size, o.Targets, MaxPoolSize)
	}
	if o.MemoryBudget < 0 {
		return nil, fmt.Errorf("create pool %s: %w: --memory-budget must not be negative", o.Name, ErrInvalid)
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	cfg := Config{Limits: o.Limits}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("create pool %s: %w", o.Name, err)
	}
	if _, err := m.images.Get(ctx, o.Image); err != nil {
		return nil, fmt.Errorf("create pool %s: image %w", o.Name, err)
	}
	p := &Pool{Name: o.Name, Image: o.Image, Size: o.Size, Targets: o.Targets, MemoryBudget: o.MemoryBudget, Limits: cfg.Limits, CreatedAt: store.Now()}
	limits, err := json.Marshal(p.Limits)
	if err != nil {
		return nil, err
	}
	_, err = m.st.DB().ExecContext(ctx, `INSERT INTO pools(name, image, size, targets, memory_budget, config, created_at) VALUES(?,?,?,?,?,?,?)`,
		p.Name, p.Image, p.Size, p.Targets, p.MemoryBudget, string(limits), p.CreatedAt.UnixMilli())
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return nil, fmt.Errorf("create pool: %w: pool %q exists", ErrNameInUse, p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("create pool %s: %w", p.Name, err)
	}
	return p, nil
}

// loadPool reads a pool's record, without its members.
func (m *Manager) loadPool(ctx context.Context, name string) (*Pool, error) {
	if err := names.Check(names.Pool, name); err != nil {
		return nil, err
	}
	var (
		p       Pool
		limits  string
		created int64
	)
	err := m.st.DB().QueryRowContext(ctx, `SELECT name, image, size, targets, memory_budget, config, created_at FROM pools WHERE name = ?`, name).
		Scan(&p.Name, &p.Image, &p.Size, &p.Targets, &p.MemoryBudget, &limits, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrPoolNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	if err := json.Unmarshal([]byte(limits), &p.Limits); err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	p.CreatedAt = time.UnixMilli(created).UTC()
	return &p, nil
}

// Pool returns a pool with its ready count and memory use. Members that
// died are removed on the way.
func (m *Manager) Pool(ctx context.Context, name string) (*Pool, error) {
	p, err := m.loadPool(ctx, name)
	if err != nil {
		return nil, err
	}
	rs, err := listRecords(ctx, m.st, name, false)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if m.locked(r.ID) {
			continue // being created, or being claimed
		}
		if err := m.reconcile(ctx, r); err != nil {
			return nil, err
		}
		switch r.State {
		case StateRunning:
			p.Ready++
		case StateCreated:
			p.TargetsReady++
		default:
			m.discard(ctx, r)
			continue
		}
		if st, err := m.be.Stats(ctx, &r.spec); err == nil {
			p.MemoryUsed += st.MemoryBytes
		}
	}
	return p, nil
}

// poolNames lists the pools' names.
func (m *Manager) poolNames(ctx context.Context) ([]string, error) {
	rows, err := m.st.DB().QueryContext(ctx, `SELECT name FROM pools ORDER BY name`)
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
func (m *Manager) Pools(ctx context.Context) ([]*Pool, error) {
	names, err := m.poolNames(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Pool, 0, len(names))
	for _, n := range names {
		p, err := m.Pool(ctx, n)
		if errors.Is(err, ErrPoolNotFound) {
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
	res, err := m.st.DB().ExecContext(ctx, `DELETE FROM pools WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("remove pool %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("remove pool: %w: %q", ErrPoolNotFound, name)
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
		if err := m.Remove(ctx, r.ID, true); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FillPool starts sandboxes until the pool holds Size of them, then
// creates restore targets until it holds Targets, or stops where one more
// would go over its memory budget (ErrPoolBudget). Only one filler works
// on a pool at a time; another returns at once. It returns how many
// sandboxes it made.
func (m *Manager) FillPool(ctx context.Context, name string) (int, error) {
	// The name becomes a file name: check it before anything else.
	if err := names.Check(names.Pool, name); err != nil {
		return 0, fmt.Errorf("fill pool: %w", err)
	}
	f, err := m.openLock("pool-" + name)
	if err != nil {
		return 0, fmt.Errorf("fill pool %s: %w", name, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return 0, nil // another filler is at work
	}
	made := 0
	for {
		p, err := m.Pool(ctx, name)
		if err != nil {
			return made, fmt.Errorf("fill pool: %w", err)
		}
		start := p.Ready < p.Size
		if !start && p.TargetsReady >= p.Targets {
			return made, nil
		}
		// Judge the next sandbox by what the waiting ones use.
		next := int64(64 << 20)
		if n := p.Ready + p.TargetsReady; n > 0 {
			next = p.MemoryUsed / int64(n)
		}
		if p.MemoryUsed+next > p.MemoryBudget {
			return made, fmt.Errorf("fill pool %s: %w: %d of %d ready and %d of %d targets use %s of %s", name, ErrPoolBudget,
				p.Ready, p.Size, p.TargetsReady, p.Targets, units.FormatBytes(p.MemoryUsed), units.FormatBytes(p.MemoryBudget))
		}
		sb, err := m.create(ctx, CreateOptions{Image: p.Image, Config: Config{Limits: p.Limits}, Start: start}, name)
		if err != nil {
			return made, fmt.Errorf("fill pool %s: %w", name, err)
		}
		if _, err := m.loadPool(ctx, name); errors.Is(err, ErrPoolNotFound) {
			m.Remove(context.WithoutCancel(ctx), sb.ID, true)
			return made, fmt.Errorf("fill pool: %w", err)
		}
		made++
	}
}

// claim makes a sandbox out of one waiting in o.Pool. An empty pool falls
// back to a cold create with the pool's image and limits. Either way the
// pool is then refilled through the manager's Refill hook.
func (m *Manager) claim(ctx context.Context, o CreateOptions) (*Sandbox, error) {
	p, err := m.loadPool(ctx, o.Pool)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	switch {
	case o.Image != "" && o.Image != p.Image:
		return nil, fmt.Errorf("create: %w: pool %s holds image %s, not %s", ErrInvalid, p.Name, p.Image, o.Image)
	case len(o.Config.Cmd) > 0:
		return nil, fmt.Errorf("create: %w: a pooled sandbox runs no main command; run commands with exec", ErrInvalid)
	case o.Config.Network.Enabled():
		// Pool members boot before anyone asks, with --net none; a network
		// is set up at create, so it cannot be given to one afterwards.
		return nil, fmt.Errorf("create: %w: pooled sandboxes have no network; drop --pool to use --net", ErrInvalid)
	case !limitsFit(o.Config.Limits, p.Limits):
		return nil, fmt.Errorf("create: %w: pool %s has limits %+v; leave limits unset or equal", ErrInvalid, p.Name, p.Limits)
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
		r, unlock, err := m.take(ctx, p.Name, o.Name, StateRunning)
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
	return m.create(ctx, CreateOptions{Name: o.Name, Image: p.Image, Config: cfg, Start: true}, "")
}

// limitsFit reports whether the limits asked for (zero: any) are the
// pool's.
func limitsFit(want, have backend.Limits) bool {
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
func (m *Manager) take(ctx context.Context, pool, name string, state State) (*record, func(), error) {
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
		if state == StateCreated {
			next = StateCreating
		}
		_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET pool = '', name = ?, state = ? WHERE id = ?`, name, next, id)
		return nameErr(&record{Sandbox: Sandbox{Name: name}}, err)
	})
	if err != nil || id == "" {
		return nil, nil, err
	}
	unlock, err := m.lock(id)
	if err != nil {
		return nil, nil, err
	}
	r, err := lookup(ctx, m.st, id)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return r, unlock, nil
}

// adopt turns a taken member into the sandbox the user asked for: its
// config, hostname, environment and clock, handed to its running agent.
func (m *Manager) adopt(ctx context.Context, r *record, cfg Config) (*Sandbox, error) {
	if err := m.reconcile(ctx, r); err != nil {
		return nil, err
	}
	if r.State != StateRunning {
		return nil, fmt.Errorf("%s: %w: the pooled sandbox died", r.ID, ErrNotRunning)
	}
	img, err := m.images.Get(ctx, r.ImageID)
	if err != nil {
		return nil, err
	}
	// The hostname is the member's own (sb-<ID>, unique): root in a
	// sandbox lacks CAP_SYS_ADMIN, so not even the agent can change it.
	cfg.Hostname = r.Config.Hostname
	r.Config, r.CreatedAt = cfg, store.Now()
	r.spec = m.specFor(r, img)
	startClock(r)
	id := agent.Identity{Env: r.spec.Env, MachineID: r.spec.MachineID,
		Deadline: r.spec.Deadline, Dir: r.spec.WorkDir, User: r.spec.User}
	if err := m.be.Agent(&r.spec).SetIdentity(ctx, id); err != nil {
		return nil, fmt.Errorf("%s: hand over identity: %w", r.ID, err)
	}
	if err := update(ctx, m.st, r); err != nil {
		return nil, err
	}
	return &r.Sandbox, nil
}
