package sandbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/agent"
	"smolvm.dev/smolvm/backend"
	"smolvm.dev/smolvm/image"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/network"
	"smolvm.dev/smolvm/snapshot"
	"smolvm.dev/smolvm/store"
)

// Manager creates and operates sandboxes. Several managers in several
// processes may share one data directory: records live in SQLite, and
// per-sandbox file locks serialize lifecycle changes.
type Manager struct {
	dataDir     string
	st          *store.Store
	images      *image.Store
	be          backend.Backend
	snaps       *snapshot.Store
	agentBinary string
	events      hub
	refill      func(pool string)
	net         *network.Host
}

// Options configure a Manager.
type Options struct {
	DataDir string
	Store   *store.Store
	Images  *image.Store
	Backend backend.Backend
	// AgentBinary is the static smolvm binary run as each sandbox's PID 1.
	AgentBinary string
	// Snapshots stores checkpoints; without it checkpoint, restore and
	// fork are refused.
	Snapshots *snapshot.Store
	// Refill is called after a sandbox is taken from a pool; it should
	// arrange for FillPool to run, in the background or in another
	// process. Nil leaves refilling to the caller.
	Refill func(pool string)
	// Network sets up sandbox networks; nil allows only --net none.
	Network *network.Host
}

// New returns a Manager.
func New(ctx context.Context, o Options) (*Manager, error) {
	if err := o.Store.Migrate(ctx, "sandbox", schema); err != nil {
		return nil, err
	}
	for _, d := range []string{"sandboxes", "locks"} {
		if err := os.MkdirAll(filepath.Join(o.DataDir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if o.Network != nil {
		if err := o.Network.Prepare(ctx); err != nil {
			return nil, err
		}
	}
	return &Manager{dataDir: o.DataDir, st: o.Store, images: o.Images, be: o.Backend, snaps: o.Snapshots, agentBinary: o.AgentBinary, refill: o.Refill, net: o.Network}, nil
}

// CreateOptions describe a new sandbox.
type CreateOptions struct {
	Name   string
	Image  string // empty: the builtin host image, or the pool's
	Config Config
	Start  bool
	// Pool takes a ready sandbox from this pool (see CreatePool), which
	// skips every cold step; it implies Start.
	Pool string
}

// Create makes a sandbox, and starts it when asked. It either succeeds or
// leaves nothing behind: a failure at any step removes what earlier steps
// made, and a crash mid-way leaves an orphan that GC removes.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Sandbox, error) {
	if o.Pool != "" {
		return m.claim(ctx, o)
	}
	return m.create(ctx, o, "")
}

// create makes a sandbox; a pool's member waits, unlisted, in that pool.
func (m *Manager) create(ctx context.Context, o CreateOptions, pool string) (*Sandbox, error) {
	cfg := o.Config
	if err := m.checkConfig(&cfg); err != nil {
		return nil, err
	}
	id := newID()
	name := o.Name
	if name == "" {
		name = "sb-" + id
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	ref := o.Image
	if ref == "" {
		ref = DefaultImage
	}
	img, err := m.images.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("create: image %w", err)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = hostnameFor(name, id)
	}
	r := &record{Sandbox: Sandbox{
		ID: id, Name: name, Image: ref, ImageID: img.ID, Backend: m.be.Name(),
		State: StateCreating, Config: cfg, CreatedAt: store.Now(),
	}, pool: pool}
	r.spec = m.specFor(r, img)
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
	fail := func(err error) (*Sandbox, error) {
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
	if err := m.setupNetwork(ctx, r); err != nil {
		return fail(err)
	}
	if o.Start {
		err = m.start(ctx, r, m.be.Run)
	} else {
		err = m.be.Create(ctx, &r.spec)
		r.State = StateCreated
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
func (m *Manager) checkConfig(cfg *Config) error {
	if cfg.Policy != "" {
		abs, pol, err := validPolicy(cfg.Policy)
		if err != nil {
			return err
		}
		cfg.Policy = abs
		if err := m.policyNetwork(cfg, pol); err != nil {
			return err
		}
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Network != nil && m.net == nil {
		return fmt.Errorf("%w: --net %s: this smolvm has no network host configured", ErrInvalid, cfg.Network.Mode)
	}
	return nil
}

var hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func hostnameFor(name, id string) string {
	if hostnameRE.MatchString(name) {
		return name
	}
	return "sb-" + id
}

// specFor derives the backend spec. The image supplies defaults that the
// user's config overrides, as docker does.
func (m *Manager) specFor(r *record, img *image.Image) backend.Spec {
	cfg := r.Config
	s := backend.Spec{
		ID:          r.ID,
		Hostname:    cfg.Hostname,
		Dir:         filepath.Join(m.dataDir, "sandboxes", r.ID),
		Rootfs:      m.rootfs(img),
		Env:         agent.MergeEnv(img.Config.Env, cfg.Env, []string{"SMOLVM_SANDBOX_ID=" + r.ID, "SMOLVM_SANDBOX_NAME=" + r.Name, "HOSTNAME=" + cfg.Hostname}),
		WorkDir:     firstNonEmpty(cfg.WorkDir, img.Config.WorkingDir),
		User:        firstNonEmpty(cfg.User, img.Config.User),
		Limits:      cfg.Limits,
		AgentBinary: m.agentBinary,
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
		s.Main = &agent.Process{Args: args}
	}
	return s
}

func (m *Manager) rootfs(img *image.Image) backend.Rootfs {
	rf := m.images.Rootfs(img)
	out := backend.Rootfs{LowerDirs: rf.LowerDirs}
	for _, mt := range rf.Mounts {
		out.Mounts = append(out.Mounts, backend.Mount{Source: mt.Source, Destination: mt.Destination})
	}
	return out
}

// ImageRootfs resolves an image to what a backend mounts, for tools that
// drive a backend directly (benchmark baselines).
func (m *Manager) ImageRootfs(ctx context.Context, ref string) (backend.Rootfs, error) {
	img, err := m.images.Get(ctx, ref)
	if err != nil {
		return backend.Rootfs{}, err
	}
	return m.rootfs(img), nil
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
	f, err := m.openLock(id)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", id, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", id, err)
	}
	return func() { f.Close() }, nil
}

// locked reports whether another process holds id's lock right now.
func (m *Manager) locked(id string) bool {
	f, err := m.openLock(id)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
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
func (m *Manager) Start(ctx context.Context, ref string) (*Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	switch r.State {
	case StateRunning:
		return nil, fmt.Errorf("start %s: %w: already running", r.Name, ErrState)
	case StatePaused:
		return nil, fmt.Errorf("start %s: %w: paused (resume it)", r.Name, ErrState)
	case StateStopped, StateExpired:
		// runsc cannot restart a stopped container: recreate it, keeping
		// the record, name and image.
		if err := m.be.Delete(ctx, &r.spec); err != nil {
			return nil, fmt.Errorf("start %s: %w", r.Name, err)
		}
		if r.Config.Network != nil {
			if err := m.net.Ensure(ctx, r.ID, r.Config.Network); err != nil {
				return nil, fmt.Errorf("start %s: %w", r.Name, err)
			}
		}
		if err := m.be.Create(ctx, &r.spec); err != nil {
			return nil, fmt.Errorf("start %s: %w", r.Name, err)
		}
	}
	if err := m.start(ctx, r, m.be.Start); err != nil {
		m.be.Stop(context.WithoutCancel(ctx), &r.spec, time.Second)
		r.State, r.Reason = StateStopped, "failed to start: "+err.Error()
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
	r.State = StateRunning
	// A main command that could not even start is the caller's mistake
	// (a typo, a missing binary): report it now, not as a later "exited".
	if exit, ok := readExit(&r.spec); ok && (exit.Kind == agent.KindNotFound || exit.Kind == agent.KindCannotRun) {
		return &StartError{Exit: exit}
	}
	return nil
}

// startClock marks r started now, with its time to live from now on.
func startClock(r *record) {
	now := store.Now()
	r.StartedAt, r.FinishedAt, r.ExitCode, r.Reason = &now, nil, nil, ""
	r.setDeadline(now, r.Config.TTL)
}

// StartError is a sandbox whose main command could not be started.
type StartError struct{ Exit agent.Exit }

func (e *StartError) Error() string {
	return fmt.Sprintf("main command: %s (exit %d)", e.Exit.Error, e.Exit.Code)
}

// readExit reads the exit the agent recorded for the main command.
func readExit(s *backend.Spec) (agent.Exit, bool) {
	var exit agent.Exit
	p, err := os.ReadFile(filepath.Join(s.Dir, "run", "exit.json"))
	if err != nil || json.Unmarshal(p, &exit) != nil {
		return agent.Exit{}, false
	}
	return exit, true
}

// acquire looks up ref, takes its lock and reconciles it under the lock.
func (m *Manager) acquire(ctx context.Context, ref string) (*record, func(), error) {
	r, err := lookup(ctx, m.st, ref)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := m.lock(r.ID)
	if err != nil {
		return nil, nil, err
	}
	// Re-read: the record may have changed while we waited.
	r, err = lookup(ctx, m.st, r.ID)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	if r.State == StateCreating {
		unlock()
		return nil, nil, fmt.Errorf("%s: %w; run smolvm gc", r.Name, ErrOrphan)
	}
	if err := m.reconcile(ctx, r); err != nil {
		unlock()
		return nil, nil, err
	}
	return r, unlock, nil
}

// Stop stops a running or paused sandbox.
func (m *Manager) Stop(ctx context.Context, ref string, timeout time.Duration) (*Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.State == StateExpired {
		return nil, expiredError(r)
	}
	if r.State != StateRunning && r.State != StatePaused {
		return &r.Sandbox, nil
	}
	if err := m.be.Stop(ctx, &r.spec, timeout); err != nil {
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
	r, err := lookup(ctx, m.st, ref)
	if err != nil {
		return err
	}
	if r.State == StateCreating && !m.locked(r.ID) {
		return m.removeOrphan(ctx, r)
	}
	r, unlock, err := m.acquire(ctx, r.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if (r.State == StateRunning || r.State == StatePaused) && !force {
		return fmt.Errorf("remove %s: %w: it is %s; stop it first or use -f", r.Name, ErrState, r.State)
	}
	return m.removeRecord(ctx, r)
}

// removeRecord deletes a sandbox that existed, leaving a tombstone.
func (m *Manager) removeRecord(ctx context.Context, r *record) error {
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
	err := m.be.Delete(ctx, &r.spec)
	if r.Config.Network != nil {
		err = errors.Join(err, m.net.Teardown(ctx, r.ID))
	}
	return err
}

// Get returns a sandbox's record, reconciled with what is really running.
// An expired sandbox is an *ExpiredError (which carries the record).
func (m *Manager) Get(ctx context.Context, ref string) (*Sandbox, error) {
	r, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r.State == StateExpired {
		return nil, expiredError(r)
	}
	return &r.Sandbox, nil
}

func (m *Manager) get(ctx context.Context, ref string) (*record, error) {
	r, err := lookup(ctx, m.st, ref)
	if err != nil {
		return nil, err
	}
	if err := m.reconcile(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// List returns every sandbox, reconciled.
func (m *Manager) List(ctx context.Context) ([]*Sandbox, error) {
	rs, err := listRecords(ctx, m.st, "", false)
	if err != nil {
		return nil, err
	}
	out := make([]*Sandbox, 0, len(rs))
	for _, r := range rs {
		if err := m.reconcile(ctx, r); err != nil {
			return nil, err
		}
		out = append(out, &r.Sandbox)
	}
	return out, nil
}

// reconcile brings r in line with the backend: a sandbox that died, or
// whose main process exited, is recorded as stopped with the reason.
func (m *Manager) reconcile(ctx context.Context, r *record) error {
	if r.State == StateCreating {
		if !m.locked(r.ID) {
			r.Reason = "orphaned by a crashed create; run smolvm gc"
		}
		return nil
	}
	if r.State != StateRunning && r.State != StatePaused && r.State != StateCreated {
		return nil
	}
	st, err := m.be.State(ctx, &r.spec)
	if err != nil {
		return fmt.Errorf("state of %s: %w", r.Name, err)
	}
	switch st {
	case backend.StatusRunning:
		if r.State == StateCreated {
			r.State = StateRunning
			return update(ctx, m.st, r)
		}
		return nil
	case backend.StatusPaused:
		if r.State != StatePaused {
			r.State = StatePaused
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
	r.State, r.FinishedAt = StateStopped, &now
	exit, haveExit := readExit(&r.spec)
	stats, _ := m.be.Stats(ctx, &r.spec)
	switch {
	case stats != nil && stats.OOMKills > 0:
		code := 137
		r.ExitCode, r.Reason = &code, fmt.Sprintf("out of memory (limit %s)", units.FormatBytes(r.Config.Limits.Memory))
	case haveExit:
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
func (m *Manager) Exec(ctx context.Context, ref string, p agent.Process, stdio agent.Stdio) (agent.Exit, error) {
	r, err := m.running(ctx, ref)
	if err != nil {
		return agent.Exit{}, err
	}
	if err := m.checkPolicy(ctx, r, p.Args); err != nil {
		return agent.Exit{}, err
	}
	var exit agent.Exit
	err = m.withAgent(ctx, r, func() (err error) {
		exit, err = m.be.Exec(ctx, &r.spec, p, stdio)
		return err
	})
	if err != nil && errors.Is(err, agent.ErrUnavailable) && ctx.Err() == nil {
		if dead := m.awaitDeath(ctx, r.ID); dead != nil {
			code := 137
			if dead.ExitCode != nil {
				code = *dead.ExitCode
			}
			return agent.Exit{Code: code, Error: "sandbox stopped during exec: " + dead.Reason}, nil
		}
	}
	return exit, err
}

// withAgent runs op against r's agent. An agent that is not listening
// was closed for a checkpoint (tens of milliseconds), or after a host died
// mid-checkpoint (until its quiesce timeout); nothing of op ran then, so
// withAgent waits for the agent while the sandbox runs, and tries once
// more.
func (m *Manager) withAgent(ctx context.Context, r *record, op func() error) error {
	err := op()
	if !errors.Is(err, agent.ErrNotListening) {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, agent.DefaultQuiesceTimeout+2*time.Second)
	defer cancel()
	c := m.be.Agent(&r.spec)
	for delay := time.Millisecond; c.Ping(wctx) != nil; delay = min(2*delay, 50*time.Millisecond) {
		if st, _ := m.be.State(wctx, &r.spec); st != backend.StatusRunning {
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
		if r.State == StateStopped {
			return r
		}
		if m.be.Agent(&r.spec).Ping(ctx) == nil {
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
	if r.State == StateExpired {
		return nil, expiredError(r)
	}
	if r.State != StateRunning {
		what := string(r.State)
		if r.Reason != "" {
			what += " (" + r.Reason + ")"
		}
		return nil, fmt.Errorf("%s: %w: sandbox is %s", r.Name, ErrNotRunning, what)
	}
	return r, nil
}
