// Package manager is the local sandbox.Service: it runs sandboxes on this
// host through backends, with durable records in SQLite, images,
// snapshots and warm pools.
//
// Open is the one way to assemble it from a data directory, for the CLI,
// the server and tests alike. It lives here rather than in a package above
// so that this package's own tests, which cannot import such a package,
// take the same path.
package manager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/runtime/volume"
	"smolvm.dev/smolvm/sandbox"
)

// Manager creates and operates sandboxes. Several managers in several
// processes may share one data directory: records live in SQLite, and
// per-sandbox file locks serialize lifecycle changes.
type Manager struct {
	dataDir     string
	st          *store.Store
	images      *image.Store
	backends    *backend.Set
	snaps       *snapshot.Store
	guestBinary string
	events      hub
	refill      func(pool string)
	net         *network.Host
	gate        Gate
	tenants     *tenant.Store
	volumes     *volume.Store
	quota       quotas
}

// Config describes the local runtime of one data directory.
type Config struct {
	// DataDir holds the database, images, snapshots and sandboxes.
	DataDir string
	// Backends run sandboxes; every operation on a sandbox goes to the
	// backend its record names. New sandboxes get the one named
	// DefaultBackend (the first if empty) unless they ask for another.
	Backends       []backend.Backend
	DefaultBackend string
	// GuestBinary is the static smolvm-guest binary run as each sandbox's
	// PID 1.
	GuestBinary string
	// Network sets up sandbox networks; nil allows only --net none. Open
	// uses a copy with its directory in the data dir and the store set.
	Network *network.Host
	// Refill is called after a sandbox is taken from a pool; it should
	// arrange for FillPool to run, in the background or in another
	// process. Nil leaves refilling to the caller.
	Refill func(pool string)
	// Gate makes the exec gate over the data directory's database
	// (trust.NewGates); without one, sandboxes under a trust policy are
	// refused.
	Gate func(*store.Store) Gate
}

// Open opens the data directory's database and its image and snapshot
// stores, and returns a Manager over them. Close closes them.
func Open(ctx context.Context, c Config) (*Manager, error) {
	backends, err := backend.NewSet(c.DefaultBackend, c.Backends...)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, c.DataDir)
	if err != nil {
		return nil, err
	}
	m, err := assemble(ctx, c, st, backends)
	if err != nil {
		st.Close()
		return nil, err
	}
	return m, nil
}

// assemble opens the stores in st and makes the Manager.
func assemble(ctx context.Context, c Config, st *store.Store, backends *backend.Set) (*Manager, error) {
	images, err := image.Open(ctx, c.DataDir, st)
	if err != nil {
		return nil, err
	}
	snaps, err := snapshot.Open(ctx, c.DataDir, st)
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx, "sandbox", schema); err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx, "usage", usageSchema); err != nil {
		return nil, err
	}
	tenants, err := tenant.Open(ctx, st)
	if err != nil {
		return nil, err
	}
	volumes, err := volume.Open(ctx, c.DataDir, st)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"sandboxes", "locks"} {
		if err := os.MkdirAll(filepath.Join(c.DataDir, d), 0o700); err != nil {
			return nil, err
		}
	}
	m := &Manager{dataDir: c.DataDir, st: st, images: images, backends: backends, snaps: snaps, guestBinary: c.GuestBinary, refill: c.Refill,
		tenants: tenants, volumes: volumes, quota: quotas{pending: map[string]demand{}, creates: map[string][]time.Time{}}}
	if c.Gate != nil {
		m.gate = c.Gate(st)
	}
	if c.Network != nil {
		h := *c.Network
		h.Dir, h.Store = filepath.Join(c.DataDir, "net"), st
		if err := h.Prepare(ctx); err != nil {
			return nil, err
		}
		m.net = &h
	}
	return m, nil
}

// Close waits until the snapshots it checkpointed are sealed (hashed and
// durable: see snapshot.Staging.Commit), then closes the database.
func (m *Manager) Close() error {
	m.snaps.Wait()
	return m.st.Close()
}

// Store returns the database, which other components of the data
// directory (trust ledgers, say) register their tables in.
func (m *Manager) Store() *store.Store { return m.st }

// Images returns the image store.
func (m *Manager) Images() *image.Store { return m.images }

// Snapshots returns the snapshot store.
func (m *Manager) Snapshots() *snapshot.Store { return m.snaps }

// Create makes a sandbox, and starts it when asked. It either succeeds or
// leaves nothing behind: a failure at any step removes what earlier steps
// made, and a crash mid-way leaves an orphan that GC removes.
func (m *Manager) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	// A template's name (which no image reference with '/' or ':' is)
	// wins over an image's: see templates.go.
	if o.Pool == "" && names.Check(names.Template, o.Image) == nil {
		t, err := m.Template(ctx, o.Image)
		if err == nil {
			return m.fromTemplate(ctx, t, o)
		}
		if !errors.Is(err, sandbox.ErrTemplateNotFound) {
			return nil, fmt.Errorf("create: %w", err)
		}
	}
	// Rated here, counted in create: a pooled sandbox already counts.
	if err := m.rate(ctx, 1); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if o.Pool != "" {
		return m.claim(ctx, o)
	}
	return m.create(ctx, o, "", "")
}

// CreateWriting makes a sandbox like Create whose root filesystem's writes
// go straight into upper, an empty host directory, as an overlayfs upper
// layer (backend.Rootfs.Upper): image builds read it as a step's layer
// once the sandbox is removed. It is no part of sandbox.Service, because
// a remote caller must never name a host path.
func (m *Manager) CreateWriting(ctx context.Context, o sandbox.CreateOptions, upper string) (*sandbox.Sandbox, error) {
	if o.Pool != "" || upper == "" {
		return nil, fmt.Errorf("%w: a sandbox writing to a host directory needs the directory and no pool", sandbox.ErrInvalid)
	}
	if err := m.rate(ctx, 1); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	return m.create(ctx, o, "", upper)
}

// create makes a sandbox; a pool's member waits, unlisted, in that pool.
// upper, if set, takes its writes (CreateWriting).
func (m *Manager) create(ctx context.Context, o sandbox.CreateOptions, pool, upper string) (*sandbox.Sandbox, error) {
	cfg := o.Config
	if err := m.checkConfig(&cfg); err != nil {
		return nil, err
	}
	be, err := m.newBackend(o.Backend)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	id := newID()
	name := o.Name
	if name == "" {
		name = "sb-" + id
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	ref, err := m.imageRef(ctx, o.Image)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	img, err := m.images.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("create: image %w", err)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = hostnameFor(name, id)
	}
	release, err := m.admit(ctx, 1, cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	defer release()
	r := &record{Sandbox: sandbox.Sandbox{
		ID: id, Name: name, Image: ref, ImageID: img.ID, Backend: be.Name(),
		State: sandbox.StateCreating, Config: cfg, CreatedAt: store.Now(), Tenant: tenant.Owner(ctx),
	}, be: be, pool: pool}
	r.spec = m.specFor(r, img)
	r.spec.Rootfs.Upper = upper
	if r.spec.Main != nil {
		if err := m.checkPolicy(ctx, r, r.spec.Main.Args); err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
	}

	unlock, err := m.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	fail := func(err error) (*sandbox.Sandbox, error) {
		// Clean up with a fresh context: ctx may be why we failed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		m.release(cctx, r)
		deleteRecord(cctx, m.st.DB(), id)
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	// The SQLite driver reports a statement whose context ended as it
	// finished as failed, though it wrote the row: remove it either way.
	if err := insert(ctx, m.st, r); err != nil {
		return fail(err)
	}
	release() // the record counts now
	if err := m.mountVolumes(ctx, r); err != nil {
		return fail(err)
	}
	if err := m.setupNetwork(ctx, r); err != nil {
		return fail(err)
	}
	if o.Start {
		err = m.start(ctx, r, be.Run)
	} else {
		err = be.Create(ctx, &r.spec)
		r.State = sandbox.StateCreated
	}
	if err != nil {
		return fail(err)
	}
	if err := update(ctx, m.st, r); err != nil {
		return fail(err)
	}
	m.publish("created", &r.Sandbox)
	if o.Start {
		m.publish("started", &r.Sandbox)
	}
	return &r.Sandbox, nil
}

// checkConfig fills defaults and checks cfg.
func (m *Manager) checkConfig(cfg *sandbox.Config) error {
	if cfg.TrustRepo != "" {
		if err := m.policyConfig(cfg); err != nil {
			return err
		}
	}
	if err := validate(cfg); err != nil {
		return err
	}
	if err := sandbox.CheckVolumeMounts(cfg.Volumes); err != nil {
		return err
	}
	if cfg.Network != nil && m.net == nil {
		return fmt.Errorf("%w: --net %s: this smolvm has no network host configured", sandbox.ErrInvalid, cfg.Network.Mode)
	}
	return nil
}

// newBackend returns the backend a new sandbox or pool asked for by name,
// or the default one.
func (m *Manager) newBackend(name string) (backend.Backend, error) {
	if name == "" {
		return m.backends.Default(), nil
	}
	be, err := m.backends.Get(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)
	}
	return be, nil
}

var hostnameRE = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func hostnameFor(name, id string) string {
	if hostnameRE().MatchString(name) {
		return name
	}
	return "sb-" + id
}

// specFor derives the backend spec. The image supplies defaults that the
// user's config overrides, as docker does.
func (m *Manager) specFor(r *record, img *sandbox.Image) backend.Spec {
	cfg := r.Config
	s := backend.Spec{
		ID:          r.ID,
		Hostname:    cfg.Hostname,
		Dir:         filepath.Join(m.dataDir, "sandboxes", r.ID),
		Rootfs:      m.rootfs(img, cfg.Limits.Disk),
		Env:         guest.MergeEnv(img.Config.Env, cfg.Env, []string{"SMOLVM_SANDBOX_ID=" + r.ID, "SMOLVM_SANDBOX_NAME=" + r.Name, "HOSTNAME=" + cfg.Hostname}),
		WorkDir:     firstNonEmpty(cfg.WorkDir, img.Config.WorkingDir),
		User:        firstNonEmpty(cfg.User, img.Config.User),
		Limits:      cfg.Limits,
		GuestBinary: m.guestBinary,
		IdleTimeout: cfg.IdleTimeout,
		MachineID:   newMachineID(),
	}
	if cfg.Network != nil {
		s.NetNS = m.net.NetNSPath(r.ID)
		s.Rootfs.Mounts = append(s.Rootfs.Mounts, backend.Mount{Source: m.net.ResolvConf(r.ID), Destination: "/etc/resolv.conf"})
	}
	args := cfg.Cmd
	if len(args) == 0 {
		args = img.Config.Cmd
	}
	args = append(append([]string(nil), img.Config.Entrypoint...), args...)
	if len(args) > 0 {
		s.Main = &sandbox.Process{Args: args}
	}
	return s
}

// refreshSpec renews what a stopped sandbox's stored spec says of this
// host before it boots again: the guest binary's path, and the root
// filesystem when the record was written by a smolvm that described it
// otherwise (before Rootfs named its image), so that an upgrade does not
// strand stopped sandboxes.
func (m *Manager) refreshSpec(ctx context.Context, r *record) error {
	r.spec.GuestBinary = m.guestBinary
	if r.spec.Rootfs.ImageID != "" {
		return nil
	}
	img, err := m.images.Get(ctx, r.ImageID)
	if err != nil {
		return fmt.Errorf("image %w", err)
	}
	r.spec.Rootfs = m.specFor(r, img).Rootfs
	return nil
}

// rootfs describes img's root filesystem, with a writable layer of
// disk bytes (0: no cap).
func (m *Manager) rootfs(img *sandbox.Image, disk int64) backend.Rootfs {
	out := backend.Rootfs{ImageID: img.ID, WritableSize: disk, Host: img.Builtin}
	for _, l := range m.images.Layers(img) {
		out.Layers = append(out.Layers, backend.Layer{Digest: l.DiffID, Dir: l.Dir})
	}
	for _, mt := range m.images.Rootfs(img).Mounts {
		out.Mounts = append(out.Mounts, backend.Mount{Source: mt.Source, Destination: mt.Destination})
	}
	return out
}

// ImageRootfs resolves an image (empty: the default, as Create's) to what
// a backend mounts, for tools that drive a backend directly (benchmark
// baselines, which so run the image smolvm's sandboxes do).
func (m *Manager) ImageRootfs(ctx context.Context, ref string) (backend.Rootfs, error) {
	ref, err := m.imageRef(ctx, ref)
	if err != nil {
		return backend.Rootfs{}, err
	}
	img, err := m.images.Get(ctx, ref)
	if err != nil {
		return backend.Rootfs{}, err
	}
	return m.rootfs(img, 0), nil
}

// imageRef is ref, or for "" the image a sandbox naming none runs: the
// base image once built, else the builtin host image.
func (m *Manager) imageRef(ctx context.Context, ref string) (string, error) {
	if ref != "" {
		return ref, nil
	}
	return m.images.Default(ctx)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// lock takes the sandbox's lifecycle lock. It is an flock, so a crashed
// holder releases it, which is how GC tells an orphan from a slow create.
func (m *Manager) lock(id string) (func(), error) {
	p, err := m.lockPath(id)
	if err == nil {
		var unlock func()
		if unlock, err = flock.Lock(p); err == nil {
			return unlock, nil
		}
	}
	return nil, fmt.Errorf("lock %s: %w", id, err)
}

// locked reports whether another process holds id's lock right now.
func (m *Manager) locked(id string) bool {
	p, err := m.lockPath(id)
	return err == nil && flock.Held(p)
}

// openLock opens (creating) the lock file named id in the data dir's
// locks directory; id is a sandbox ID, or "pool-" and a pool's name.
func (m *Manager) openLock(id string) (*os.File, error) {
	p, err := m.lockPath(id)
	if err != nil {
		return nil, err
	}
	return os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
}

// lockPath is where id's lock file lives: always inside the locks
// directory, whatever id holds.
func (m *Manager) lockPath(id string) (string, error) {
	return names.Join(m.dataDir, "locks", id+".lock")
}

// removeLock removes id's lock file, once its sandbox is gone.
func (m *Manager) removeLock(id string) {
	if p, err := m.lockPath(id); err == nil {
		os.Remove(p)
	}
}

// Start starts a created or stopped sandbox.
func (m *Manager) Start(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	boot := r.be.Start
	switch r.State {
	case sandbox.StateRunning:
		return nil, fmt.Errorf("start %s: %w: already running", r.Name, sandbox.ErrState)
	case sandbox.StatePaused:
		return nil, fmt.Errorf("start %s: %w: paused (resume it)", r.Name, sandbox.ErrState)
	case sandbox.StateStopped, sandbox.StateExpired:
		release, err := m.admit(ctx, 1, r.Config.Limits)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", r.Name, err)
		}
		defer release()
		boot = r.be.Restart
		if err := m.refreshSpec(ctx, r); err != nil {
			return nil, fmt.Errorf("start %s: %w", r.Name, err)
		}
		if err := m.mountVolumes(ctx, r); err != nil {
			return nil, fmt.Errorf("start %s: %w", r.Name, err)
		}
		if r.Config.Network != nil {
			if err := m.net.Ensure(ctx, r.ID, r.Config.Network); err != nil {
				return nil, fmt.Errorf("start %s: %w", r.Name, err)
			}
		}
	}
	if err := m.start(ctx, r, boot); err != nil {
		r.be.Stop(context.WithoutCancel(ctx), &r.spec, time.Second)
		r.State, r.Reason = sandbox.StateStopped, "failed to start: "+err.Error()
		update(context.WithoutCancel(ctx), m.st, r)
		return nil, err
	}
	if err := update(ctx, m.st, r); err != nil {
		return nil, err
	}
	m.publish("started", &r.Sandbox)
	return &r.Sandbox, nil
}

// start boots r with boot (the backend's Start or Run), setting its clock.
func (m *Manager) start(ctx context.Context, r *record, boot func(context.Context, *backend.Spec) error) error {
	startClock(r)
	if err := boot(ctx, &r.spec); err != nil {
		return err
	}
	r.State = sandbox.StateRunning
	// A main command that could not even start is the caller's mistake
	// (a typo, a missing binary): report it now, not as a later "exited".
	exit, err := r.be.MainExit(ctx, &r.spec)
	if err != nil {
		return err
	}
	if exit != nil && exit.NotStarted() {
		return &sandbox.StartError{Exit: exit.Exit}
	}
	return nil
}

// startClock marks r started now, with its time to live from now on.
func startClock(r *record) {
	now := store.Now()
	r.StartedAt, r.FinishedAt, r.ExitCode, r.Reason = &now, nil, nil, ""
	r.setDeadline(now, r.Config.TTL)
}

// acquire looks up ref, takes its lock and reconciles it under the lock.
func (m *Manager) acquire(ctx context.Context, ref string) (*record, func(), error) {
	r, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := m.lock(r.ID)
	if err != nil {
		return nil, nil, err
	}
	// Re-read: the record may have changed while we waited.
	r, err = m.lookup(ctx, r.ID)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	if r.State == sandbox.StateCreating {
		unlock()
		return nil, nil, fmt.Errorf("%s: %w; run smolvm gc", r.Name, sandbox.ErrOrphan)
	}
	if err := m.reconcile(ctx, r); err != nil {
		unlock()
		return nil, nil, err
	}
	return r, unlock, nil
}

// Stop stops a running or paused sandbox.
func (m *Manager) Stop(ctx context.Context, ref string, timeout time.Duration) (*sandbox.Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.State == sandbox.StateExpired {
		return nil, expiredError(r)
	}
	if r.State != sandbox.StateRunning && r.State != sandbox.StatePaused {
		return &r.Sandbox, nil
	}
	if err := m.accrue(ctx, r, r.State == sandbox.StateRunning, time.Now()); err != nil {
		return nil, fmt.Errorf("stop %s: account usage: %w", r.Name, err)
	}
	if err := r.be.Stop(ctx, &r.spec, timeout); err != nil {
		return nil, fmt.Errorf("stop %s: %w", r.Name, err)
	}
	m.finish(ctx, r, "stopped")
	if err := update(ctx, m.st, r); err != nil {
		return nil, err
	}
	m.publish(string(r.State), &r.Sandbox)
	return &r.Sandbox, nil
}

// Remove deletes a sandbox. A running one needs force.
func (m *Manager) Remove(ctx context.Context, ref string, force bool) error {
	r, err := m.lookup(ctx, ref)
	if err != nil {
		return err
	}
	if r.State == sandbox.StateCreating && !m.locked(r.ID) {
		return m.removeOrphan(ctx, r)
	}
	r, unlock, err := m.acquire(ctx, r.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if (r.State == sandbox.StateRunning || r.State == sandbox.StatePaused) && !force {
		return fmt.Errorf("remove %s: %w: it is %s; stop it first or use -f", r.Name, sandbox.ErrState, r.State)
	}
	return m.removeRecord(ctx, r)
}

// removeRecord deletes a sandbox that existed, leaving a tombstone.
func (m *Manager) removeRecord(ctx context.Context, r *record) error {
	// The last of its usage: running time of a forced remove, and bytes
	// sent, before the network's counters go with it.
	if err := m.accrue(ctx, r, r.State == sandbox.StateRunning, time.Now()); err != nil {
		return fmt.Errorf("remove %s: account usage: %w", r.Name, err)
	}
	if err := m.release(ctx, r); err != nil {
		return fmt.Errorf("remove %s: %w", r.Name, err)
	}
	err := m.st.Tx(ctx, func(tx *sql.Tx) error {
		if err := bury(ctx, tx, r); err != nil {
			return err
		}
		return deleteRecord(ctx, tx, r.ID)
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", r.Name, err)
	}
	m.removeLock(r.ID)
	m.publish("removed", &r.Sandbox)
	return nil
}

// removeOrphan deletes what a crashed create left; it never existed for
// users, so it leaves no tombstone.
func (m *Manager) removeOrphan(ctx context.Context, r *record) error {
	if err := m.release(ctx, r); err != nil {
		return fmt.Errorf("remove %s: %w", r.Name, err)
	}
	if err := deleteRecord(ctx, m.st.DB(), r.ID); err != nil {
		return fmt.Errorf("remove %s: %w", r.Name, err)
	}
	m.removeLock(r.ID)
	return nil
}

// release deletes what the backend and the network made for r.
func (m *Manager) release(ctx context.Context, r *record) error {
	// A listed record may name a backend this manager lacks.
	if err := m.bind(r); err != nil {
		return err
	}
	err := r.be.Delete(ctx, &r.spec)
	if r.Config.Network != nil {
		err = errors.Join(err, m.net.Teardown(ctx, r.ID))
	}
	return err
}

// Get returns a sandbox's record, reconciled with what is really running.
// An expired sandbox is an *ExpiredError (which carries the record).
func (m *Manager) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	r, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r.State == sandbox.StateExpired {
		return nil, expiredError(r)
	}
	return &r.Sandbox, nil
}

func (m *Manager) get(ctx context.Context, ref string) (*record, error) {
	r, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := m.reconcile(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// List returns every sandbox ctx's tenant owns, reconciled.
func (m *Manager) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	rs, err := m.listRecords(ctx, "", false)
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Sandbox, 0, len(rs))
	for _, r := range rs {
		if !tenant.Owns(ctx, r.Tenant) {
			continue
		}
		if err := m.reconcile(ctx, r); err != nil {
			return nil, err
		}
		out = append(out, &r.Sandbox)
	}
	return out, nil
}

// reconcile brings r in line with the backend: a sandbox that died, or
// whose main process exited, is recorded as stopped with the reason. A
// sandbox whose backend this manager lacks stays as last recorded.
func (m *Manager) reconcile(ctx context.Context, r *record) error {
	if r.be == nil {
		return nil
	}
	if r.State == sandbox.StateCreating {
		if !m.locked(r.ID) {
			r.Reason = "orphaned by a crashed create; run smolvm gc"
		}
		return nil
	}
	if r.State != sandbox.StateRunning && r.State != sandbox.StatePaused && r.State != sandbox.StateCreated {
		return nil
	}
	st, err := r.be.State(ctx, &r.spec)
	if err != nil {
		return fmt.Errorf("state of %s: %w", r.Name, err)
	}
	switch st {
	case backend.StatusRunning:
		if r.State == sandbox.StateCreated {
			r.State = sandbox.StateRunning
			return update(ctx, m.st, r)
		}
		return nil
	case backend.StatusPaused:
		if r.State != sandbox.StatePaused {
			r.State = sandbox.StatePaused
			return update(ctx, m.st, r)
		}
		return nil
	case backend.StatusCreated:
		return nil
	}
	m.finish(ctx, r, "")
	if err := update(ctx, m.st, r); err != nil {
		return err
	}
	m.publish(string(r.State), &r.Sandbox)
	return nil
}

// finish records a sandbox as stopped, working out why from what it left.
func (m *Manager) finish(ctx context.Context, r *record, reason string) {
	now := store.Now()
	r.State, r.FinishedAt = sandbox.StateStopped, &now
	// An exit that cannot be read counts as none: killed.
	exit, _ := r.be.MainExit(ctx, &r.spec)
	stats, _ := r.be.Stats(ctx, &r.spec)
	switch {
	case stats != nil && stats.OOMKills > 0:
		code := 137
		r.ExitCode, r.Reason = &code, fmt.Sprintf("out of memory (limit %s)", units.FormatBytes(r.Config.Limits.Memory))
	case exit != nil:
		code := exit.Code
		r.ExitCode = &code
		if !markExpired(r, exit) {
			r.Reason = firstNonEmpty(exit.Reason, reason, "exited")
		}
	case reason != "":
		r.Reason = reason
	default:
		code := 137
		r.ExitCode, r.Reason = &code, "killed"
	}
}

// Exec runs p in a running sandbox.
func (m *Manager) Exec(ctx context.Context, ref string, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	r, err := m.running(ctx, ref)
	if err != nil {
		return sandbox.Exit{}, err
	}
	if err := m.checkPolicy(ctx, r, p.Args); err != nil {
		return sandbox.Exit{}, err
	}
	var exit sandbox.Exit
	err = m.withGuest(ctx, r, func() (err error) {
		exit, err = r.be.Exec(ctx, &r.spec, p, stdio)
		return err
	})
	if err != nil && errors.Is(err, guest.ErrUnavailable) && ctx.Err() == nil {
		if dead := m.awaitDeath(ctx, r.ID); dead != nil {
			code := 137
			if dead.ExitCode != nil {
				code = *dead.ExitCode
			}
			return sandbox.Exit{Code: code, Error: "sandbox stopped during exec: " + dead.Reason}, nil
		}
	}
	return exit, err
}

// withGuest runs op against r's agent. An agent that is not listening
// was closed for a checkpoint (tens of milliseconds), or after a host died
// mid-checkpoint (until its quiesce timeout); nothing of op ran then, so
// withGuest waits for the agent while the sandbox runs, and tries once
// more.
func (m *Manager) withGuest(ctx context.Context, r *record, op func() error) error {
	err := op()
	if !errors.Is(err, guest.ErrNotListening) {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, guest.DefaultQuiesceTimeout+2*time.Second)
	defer cancel()
	c := r.be.Guest(&r.spec)
	for delay := time.Millisecond; c.Ping(wctx) != nil; delay = min(2*delay, 50*time.Millisecond) {
		if st, _ := r.be.State(wctx, &r.spec); st != backend.StatusRunning {
			return err
		}
		select {
		case <-wctx.Done():
			return err
		case <-time.After(delay):
		}
	}
	return op()
}

// awaitDeath is for a lost agent connection: when the sandbox is dying (an
// OOM kill takes a moment to finish), it waits briefly for the death to be
// visible and returns the final record; it returns nil if it lives on.
func (m *Manager) awaitDeath(ctx context.Context, id string) *record {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		r, err := m.get(ctx, id)
		if err != nil {
			return nil
		}
		if r.State == sandbox.StateStopped {
			return r
		}
		if r.be.Guest(&r.spec).Ping(ctx) == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// running returns r if it is running, or an error saying what it is.
func (m *Manager) running(ctx context.Context, ref string) (*record, error) {
	r, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r.State == sandbox.StateExpired {
		return nil, expiredError(r)
	}
	if r.State != sandbox.StateRunning {
		what := string(r.State)
		if r.Reason != "" {
			what += " (" + r.Reason + ")"
		}
		return nil, fmt.Errorf("%s: %w: sandbox is %s", r.Name, sandbox.ErrNotRunning, what)
	}
	return r, nil
}

// The manager is the local runtime: every capability the servers use.
var _ sandbox.Runtime = (*Manager)(nil)
