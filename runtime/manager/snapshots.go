package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// restoreMeta is what a snapshot carries for the manager: enough to build a
// copy's record the way Create would have. The image is found by the
// snapshot's image ID: the saved memory belongs to those exact layers.
type restoreMeta struct {
	Image  string         `json:"image"` // the reference the source was created with
	Config sandbox.Config `json:"config"`
	// Backend made the checkpoint, and is the only one that can restore
	// it; empty in snapshots made before it was recorded (the default).
	Backend string `json:"backend,omitempty"`
}

// snapshotter returns be's snapshot operations, for op.
func snapshotter(be backend.Backend, op string) (backend.Snapshotter, error) {
	sn, ok := be.(backend.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%s: %w (%s)", op, sandbox.ErrUnsupported, be.Name())
	}
	return sn, nil
}

// Checkpoint saves a running sandbox's memory, processes, open files and
// writable layer as a snapshot. The sandbox keeps running unless o.Stop.
// On failure nothing is stored and the sandbox carries on as before.
func (m *Manager) Checkpoint(ctx context.Context, ref string, o sandbox.CheckpointOptions) (*sandbox.Snapshot, error) {
	r, unlock, err := m.acquireRunning(ctx, ref, "checkpoint")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := m.admitSnapshot(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", r.Name, err)
	}
	sn, err := snapshotter(r.be, "checkpoint")
	if err != nil {
		return nil, err
	}
	g, err := m.snaps.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", r.Name, err)
	}
	defer g.Abort()
	if err := sn.Checkpoint(ctx, &r.spec, g.Dir(), backend.CheckpointOptions{LeaveRunning: !o.Stop}); err != nil {
		if o.Stop {
			m.reconcile(context.WithoutCancel(ctx), r)
		}
		return nil, fmt.Errorf("checkpoint %s: %w", r.Name, err)
	}
	if o.Stop {
		m.finish(ctx, r, "checkpointed")
		if err := update(ctx, m.st, r); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", r.Name, err)
		}
	}
	lin := sandbox.Lineage{Sandbox: r.ID, SandboxName: r.Name, Parent: r.Snapshot}
	snap, err := g.Commit(ctx, o.Name, r.ImageID, lin, restoreMeta{Image: r.Image, Config: r.Config, Backend: r.Backend})
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", r.Name, err)
	}
	return snap, nil
}

// acquireRunning is acquire for operations that need a running sandbox.
func (m *Manager) acquireRunning(ctx context.Context, ref, op string) (*record, func(), error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if err := notRunning(r, op); err != nil {
		unlock()
		return nil, nil, err
	}
	return r, unlock, nil
}

// notRunning says why op cannot work on r, or returns nil if r runs.
func notRunning(r *record, op string) error {
	if r.State == sandbox.StateRunning {
		return nil
	}
	what := string(r.State)
	if r.State == sandbox.StatePaused {
		what += "; resume it first"
	} else if r.Reason != "" {
		what += " (" + r.Reason + ")"
	}
	return fmt.Errorf("%s %s: %w: sandbox is %s", op, r.Name, sandbox.ErrNotRunning, what)
}

// Restore starts a new sandbox in the state saved in a snapshot. The files
// are checked against their checksums first; a corrupt snapshot is refused
// and leaves nothing behind.
//
// A hot pool of the snapshot (pool create --from SNAPSHOT --hot N) gives a
// copy it restored ahead of time: it is resumed and given its identity.
func (m *Manager) Restore(ctx context.Context, snapRef string, o sandbox.RestoreOptions) (*sandbox.Sandbox, error) {
	return m.restore(ctx, ctx, snapRef, o, nil)
}

// restore is Restore with the snapshot looked up as snapCtx's tenant (a
// public template's snapshot is not the caller's), and env added to the
// saved environment.
func (m *Manager) restore(ctx, snapCtx context.Context, snapRef string, o sandbox.RestoreOptions, env []string) (*sandbox.Sandbox, error) {
	if o.TTL < 0 {
		return nil, fmt.Errorf("restore %s: %w: time to live %s: must not be negative", snapRef, sandbox.ErrInvalid, o.TTL)
	}
	snap, meta, err := m.snapshotMeta(snapCtx, snapRef)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	if len(env) > 0 {
		meta.Config.Env = guest.MergeEnv(meta.Config.Env, env)
	}
	if o.TTL > 0 {
		meta.Config.TTL = o.TTL
	}
	if o.Labels != nil {
		if err := checkLabels(o.Labels); err != nil {
			return nil, fmt.Errorf("restore %s: %w", snapRef, err)
		}
		meta.Config.Labels = o.Labels
	}
	// Rated here, counted in admit: a hot copy already counts.
	if err := m.rate(ctx, 1); err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	if sb, err := m.claimHot(ctx, snap, meta, o.Name); err != nil || sb != nil {
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", snapRef, err)
		}
		return sb, nil
	}
	be, sn, err := m.restorer(meta)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	release, err := m.admit(ctx, 1, meta.Config.Limits)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	defer release()
	r, unlock, err := m.newCopy(ctx, o.Name, meta.Image, snap.ImageID, meta.Config, be)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	defer unlock()
	defer m.refillTargets(r)
	r.Snapshot = snap.ID
	sb, err := m.materialize(ctx, r, sn, false, func(ctx context.Context) (string, error) {
		// The record exists before the check, so a concurrent snapshot rm
		// either sees it and refuses, or ran first and Get fails here.
		snap, err := m.snaps.Get(snapCtx, snap.ID)
		if err != nil {
			return "", err
		}
		return m.snaps.Verify(snapCtx, snap)
	})
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", snapRef, err)
	}
	return sb, nil
}

// snapshotMeta finds a snapshot and reads what the manager stored in it.
func (m *Manager) snapshotMeta(ctx context.Context, ref string) (*sandbox.Snapshot, restoreMeta, error) {
	var meta restoreMeta
	snap, err := m.snaps.Get(ctx, ref)
	if err != nil {
		return nil, meta, err
	}
	if err := json.Unmarshal(snap.Meta, &meta); err != nil {
		return nil, meta, fmt.Errorf("%w: unreadable metadata: %v", snapshot.ErrCorrupt, err)
	}
	return snap, meta, nil
}

// restorer is the backend that made a snapshot, which alone can restore it.
func (m *Manager) restorer(meta restoreMeta) (backend.Backend, backend.Snapshotter, error) {
	be := m.backends.Default()
	if meta.Backend != "" {
		var err error
		if be, err = m.backends.Get(meta.Backend); err != nil {
			return nil, nil, err
		}
	}
	sn, err := snapshotter(be, "restore")
	if err != nil {
		return nil, nil, err
	}
	return be, sn, nil
}

// newCopy makes the record of a copy with its own ID, name, hostname and
// machine ID, and the saved config, on be, and returns it locked. The copy
// is a restore target taken from a pool where one fits (see target);
// otherwise it is new, and not yet written.
func (m *Manager) newCopy(ctx context.Context, name, imageRef, imageID string, cfg sandbox.Config, be backend.Backend) (*record, func(), error) {
	if name != "" {
		if err := validName(name); err != nil {
			return nil, nil, err
		}
	}
	img, err := m.images.Get(ctx, imageID)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s of the snapshot: %w", imageRef, err)
	}
	r, unlock, err := m.target(ctx, name, img.ID, cfg, be.Name())
	if err != nil || r != nil {
		if r != nil {
			// The target was created as sb-<ID>: the restored agent
			// takes the copy's hostname from its identity.
			cfg.Hostname = hostnameFor(r.Name, r.ID)
			r.Image, r.Config, r.CreatedAt, r.Tenant = imageRef, cfg, store.Now(), tenant.Owner(ctx)
			r.spec = m.specFor(r, img)
		}
		return r, unlock, err
	}
	return m.freshCopy(ctx, name, imageRef, img, cfg, be)
}

// freshCopy makes the record of a new copy, not yet written, locked.
func (m *Manager) freshCopy(ctx context.Context, name, imageRef string, img *sandbox.Image, cfg sandbox.Config, be backend.Backend) (*record, func(), error) {
	id := newID()
	if name == "" {
		name = "sb-" + id
	}
	cfg.Hostname = hostnameFor(name, id)
	r := &record{Sandbox: sandbox.Sandbox{
		ID: id, Name: name, Image: imageRef, ImageID: img.ID, Backend: be.Name(),
		State: sandbox.StateCreating, Config: cfg, CreatedAt: store.Now(), Tenant: tenant.Owner(ctx),
	}, be: be}
	r.spec = m.specFor(r, img)
	unlock, err := m.lock(id)
	if err != nil {
		return nil, nil, err
	}
	return r, unlock, nil
}

// target takes a restore target for a copy of a sandbox of image imageID
// with cfg on the backend named be: a created, never started member of a
// pool of that image, those limits and that backend, locked. Targets boot
// with no network and no volumes, so a copy with either gets none. It
// returns nil if no pool has a target ready. A target's OCI spec (hostname, mounts, limits,
// network namespace) was fixed by runsc create for the pool, not for the
// copy: whatever differs between copies must reach the restored guest as
// its identity (resume.json: env, machine ID, deadline, hostname).
func (m *Manager) target(ctx context.Context, name, imageID string, cfg sandbox.Config, be string) (*record, func(), error) {
	if cfg.Network.Enabled() || len(cfg.Volumes) > 0 {
		return nil, nil, nil
	}
	pools, err := m.poolNames(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range pools {
		p, err := m.loadPool(ctx, n)
		if err != nil || p.Targets == 0 || p.Limits != cfg.Limits || p.Backend != be {
			continue // removed meanwhile, or no targets of these limits
		}
		if img, err := m.images.Get(ctx, p.Image); err != nil || img.ID != imageID {
			continue
		}
		// A target may have died while it waited, or hold the image the
		// pool's tag named before it moved: such a one is removed, and
		// the next one tried.
		for range 3 {
			r, unlock, err := m.take(ctx, p.Name, name, sandbox.StateCreated)
			if err != nil {
				return nil, nil, err
			}
			if r == nil {
				break // empty
			}
			r.target = p.Name
			if st, err := r.be.State(ctx, &r.spec); err == nil && st == backend.StatusCreated && r.ImageID == imageID {
				return r, unlock, nil
			}
			m.discard(ctx, r)
			unlock()
		}
	}
	return nil, nil, nil
}

// refillTargets refills the pools the copies' targets came from. It runs
// once the copies serve, so that no fill competes with their restores.
func (m *Manager) refillTargets(copies ...*record) {
	if m.refill == nil {
		return
	}
	seen := map[string]bool{}
	for _, r := range copies {
		if r != nil && r.target != "" && !seen[r.target] {
			seen[r.target] = true
			m.refill(r.target)
		}
	}
}

// materialize registers r, a locked new copy or restore target, and
// restores it from the checkpoint that checkpointDir finds. With early, a
// new copy is created before checkpointDir is asked, so a fork creates its
// copies while the checkpoint is being written; a restore from a stored
// snapshot gains nothing by it and leaves the create to the backend's
// Restore, which can do both at once. A target is created already. On failure it removes
// everything it made.
func (m *Manager) materialize(ctx context.Context, r *record, sn backend.Snapshotter, early bool, checkpointDir func(context.Context) (string, error)) (*sandbox.Sandbox, error) {
	fail := func(err error) (*sandbox.Sandbox, error) {
		m.discard(ctx, r)
		return nil, err
	}
	if r.target != "" {
		// A target's record exists (in its pool): update, not insert, so
		// update writes image, snapshot and forked_from too (snapshot rm's
		// in-use check reads snapshot).
		if err := update(ctx, m.st, r); err != nil {
			return fail(err)
		}
	} else {
		// A failed insert may still have written the row (see create).
		if err := insert(ctx, m.st, r); err != nil {
			return fail(err)
		}
		// The snapshot holds no volume: the copy mounts the same ones.
		if err := m.mountVolumes(ctx, r); err != nil {
			return fail(err)
		}
		if err := m.setupNetwork(ctx, r); err != nil {
			return fail(err)
		}
		if early {
			if err := r.be.Create(ctx, &r.spec); err != nil {
				return fail(err)
			}
		}
	}
	boot := func(ctx context.Context, s *backend.Spec) error {
		dir, err := checkpointDir(ctx)
		if err != nil {
			return err
		}
		return sn.Restore(ctx, s, dir)
	}
	if rf, ok := sn.(restorerFrom); ok {
		boot = func(ctx context.Context, s *backend.Spec) error { return rf.RestoreFrom(ctx, s, checkpointDir) }
	}
	if err := m.start(ctx, r, boot); err != nil {
		return fail(err)
	}
	if err := update(ctx, m.st, r); err != nil {
		return fail(err)
	}
	m.publish("restored", &r.Sandbox)
	return &r.Sandbox, nil
}

// restorerFrom is a backend that can begin a restore before its
// checkpoint is whole (gvisor.Backend.RestoreFrom): a fork's copies then
// do their own set-up while the source is being saved.
type restorerFrom interface {
	RestoreFrom(ctx context.Context, s *backend.Spec, dir func(context.Context) (string, error)) error
}

// discard removes a copy that failed half-way, with a fresh context: ctx
// may be why it failed.
func (m *Manager) discard(ctx context.Context, r *record) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	m.release(cctx, r)
	deleteRecord(cctx, m.st.DB(), r.ID)
	m.removeLock(r.ID)
}

// Fork makes o.N running copies of a running sandbox, which keeps running.
// It is all or nothing: if one copy fails, the others are removed and the
// error says which copy failed and why.
func (m *Manager) Fork(ctx context.Context, ref string, o sandbox.ForkOptions) ([]*sandbox.Sandbox, error) {
	n := o.N
	if n < 1 || n > sandbox.MaxFork {
		return nil, fmt.Errorf("fork %s: %w: %d copies: the number of copies must be between 1 and %d", ref, sandbox.ErrInvalid, n, sandbox.MaxFork)
	}
	names := make([]string, n)
	if o.NamePrefix != "" {
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", o.NamePrefix, i+1)
			if err := validName(names[i]); err != nil {
				return nil, fmt.Errorf("fork %s: %w", ref, err)
			}
		}
	}

	src, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := notRunning(src, "fork"); err != nil {
		return nil, err
	}
	sn, err := snapshotter(src.be, "fork")
	if err != nil {
		return nil, err
	}
	// A fork of N is N creates.
	if err := m.rate(ctx, n); err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.Name, err)
	}
	release, err := m.admit(ctx, n, src.Config.Limits)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.Name, err)
	}
	defer release()
	// The checkpoint is private to this fork: it goes in a scratch
	// directory in memory that is never committed, and GC removes it if
	// we crash.
	g, err := m.snaps.Scratch(ctx)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", ref, err)
	}
	defer g.Abort()

	out := make([]*sandbox.Sandbox, n)
	// A failed copy, or a failed save, cancels the rest: they would be
	// removed anyway.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The source is saved while the copies are being made (records,
	// targets taken from pools, backend creates of the others), and the
	// copies restore as soon as the image is whole, while the source
	// resumes. A failed copy does not interrupt the save: a checkpoint cut
	// short could leave the source quiesced.
	var (
		saved, image      = make(chan struct{}), make(chan struct{})
		imageOnce         sync.Once
		saveErr, imageErr error
	)
	go func() {
		defer close(saved)
		saveErr = m.checkpointTo(ctx, src.ID, sn, g.Dir(), func() { imageOnce.Do(func() { close(image) }) })
		if saveErr != nil {
			cancel()
		}
		// A save that failed before the image was whole fails every copy.
		imageOnce.Do(func() { imageErr = saveErr; close(image) })
	}()
	// Whatever happens, the save ends before Fork returns: its staging
	// directory goes with the fork, and the source serves again.
	defer func() { <-saved }()
	dir := func(ctx context.Context) (string, error) {
		select {
		case <-image:
			return g.Dir(), imageErr
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}

	copies := make([]*record, n)
	unlocks := make([]func(), n)
	defer func() { m.refillTargets(copies...) }()
	for i := range copies {
		r, unlock, err := m.newCopy(ctx, names[i], src.Image, src.ImageID, src.Config, src.be)
		if err != nil {
			for j := range i {
				if copies[j].target != "" {
					m.discard(ctx, copies[j]) // taken from its pool
				}
				unlocks[j]()
			}
			return nil, fmt.Errorf("fork %s: %w", src.Name, err)
		}
		r.ForkedFrom, r.Snapshot = src.ID, src.Snapshot
		copies[i], unlocks[i] = r, unlock
	}
	eg, ectx := errgroup.WithContext(cctx)
	// A copy's restore partly waits (on the backend's processes starting,
	// the guest's wake-up), so several per core finish sooner: ten copies into
	// restore targets on 2 cores took 540-580 ms eight at a time, 685 ms
	// two at a time and 600-620 ms sixteen at a time.
	eg.SetLimit(4 * runtime.NumCPU())
	for i, r := range copies {
		eg.Go(func() error {
			defer unlocks[i]()
			sb, err := m.materialize(ectx, r, sn, true, dir)
			if err != nil {
				return fmt.Errorf("copy %d of %d (%s): %w", i+1, n, r.Name, err)
			}
			out[i] = sb
			return nil
		})
	}
	err = eg.Wait()
	<-saved
	if err != nil {
		for i, sb := range out {
			if sb != nil {
				m.discard(ctx, copies[i])
			}
		}
		if saveErr != nil {
			return nil, fmt.Errorf("%w; no copy was kept", saveErr)
		}
		return nil, fmt.Errorf("fork %s: %w; no copy was kept", src.Name, err)
	}
	return out, nil
}

// checkpointTo saves a running sandbox into dir, leaving it running;
// saved is called once the image is whole.
func (m *Manager) checkpointTo(ctx context.Context, ref string, sn backend.Snapshotter, dir string, saved func()) error {
	r, unlock, err := m.acquireRunning(ctx, ref, "fork")
	if err != nil {
		return err
	}
	defer unlock()
	if err := sn.Checkpoint(ctx, &r.spec, dir, backend.CheckpointOptions{LeaveRunning: true, Saved: saved}); err != nil {
		return fmt.Errorf("fork %s: %w", r.Name, err)
	}
	return nil
}

// Pause freezes every process of a running sandbox; it then uses no CPU.
func (m *Manager) Pause(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return m.transition(ctx, ref, "pause", sandbox.StateRunning, sandbox.StatePaused, func(sn backend.Snapshotter, s *backend.Spec) error {
		return sn.Pause(ctx, s)
	})
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return m.transition(ctx, ref, "resume", sandbox.StatePaused, sandbox.StateRunning, func(sn backend.Snapshotter, s *backend.Spec) error {
		return sn.Resume(ctx, s)
	})
}

func (m *Manager) transition(ctx context.Context, ref, op string, from, to sandbox.State, do func(backend.Snapshotter, *backend.Spec) error) (*sandbox.Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sn, err := snapshotter(r.be, op)
	if err != nil {
		return nil, err
	}
	if r.State != from {
		return nil, fmt.Errorf("%s %s: %w: sandbox is %s, not %s", op, r.Name, sandbox.ErrState, r.State, from)
	}
	// Usage up to the pause counts; the time paused does not.
	if err := m.accrue(ctx, r, from == sandbox.StateRunning, time.Now()); err != nil {
		return nil, fmt.Errorf("%s %s: account usage: %w", op, r.Name, err)
	}
	if err := do(sn, &r.spec); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, r.Name, err)
	}
	r.State = to
	if err := m.afterTransition(ctx, r); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, r.Name, err)
	}
	if err := update(ctx, m.st, r); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, r.Name, err)
	}
	m.publish(op+"d", &r.Sandbox)
	return &r.Sandbox, nil
}

// RemoveSnapshot deletes a snapshot no sandbox or pool rests on, as the
// API's DELETE does (MCP's snapshot_remove drives it on this host).
func (m *Manager) RemoveSnapshot(ctx context.Context, ref string) error {
	return m.snaps.Remove(ctx, ref, func(id string) (bool, error) { return m.SnapshotInUse(ctx, id) })
}
