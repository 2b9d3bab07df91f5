package fakeruntime

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// snapshot is a checkpoint: its record and a copy of the sandbox's files.
type snapshot struct {
	snap sandbox.Snapshot
	cfg  sandbox.Config
	fs   *memFS
}

// Snapshots is the fake's snapshot store; lookups are scoped as the
// sandboxes' are.
type Snapshots struct {
	r    *Runtime
	byID map[string]*snapshot // guarded by r.mu
}

var _ sandbox.Snapshots = (*Snapshots)(nil)

// find returns the snapshot nameOrID names that ctx may see. r.mu is held.
func (s *Snapshots) find(ctx context.Context, nameOrID string) (*snapshot, error) {
	if err := names.Check(names.Snapshot, nameOrID); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSnapshotName, err)
	}
	for _, sn := range s.byID {
		if tenant.Owns(ctx, sn.snap.Tenant) && (sn.snap.ID == nameOrID || slices.Contains(sn.snap.Names, nameOrID)) {
			return sn, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", sandbox.ErrSnapshotNotFound, nameOrID)
}

func (s *Snapshots) Get(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	sn, err := s.find(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	snap := sn.snap
	return &snap, nil
}

// List returns the snapshots ctx may see, oldest first.
func (s *Snapshots) List(ctx context.Context) ([]sandbox.Snapshot, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	out := []sandbox.Snapshot{}
	for _, sn := range s.byID {
		if tenant.Owns(ctx, sn.snap.Tenant) {
			out = append(out, sn.snap)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Snapshot) int { return a.Created.Compare(b.Created) })
	return out, nil
}

func (s *Snapshots) Remove(ctx context.Context, nameOrID string, inUse func(id string) (bool, error)) error {
	snap, err := s.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	used, err := inUse(snap.ID)
	if err != nil {
		return err
	}
	if used {
		return fmt.Errorf("remove snapshot %s: %w: a sandbox was restored from it", nameOrID, sandbox.ErrState)
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	delete(s.byID, snap.ID)
	return nil
}

// Export and Import move snapshots between hosts, which the fake has not.
func (s *Snapshots) Export(context.Context, *sandbox.Snapshot, io.Writer) error {
	return fmt.Errorf("export: %w", sandbox.ErrUnsupported)
}

func (s *Snapshots) Import(context.Context, io.Reader, string) (*sandbox.Snapshot, bool, error) {
	return nil, false, fmt.Errorf("import: %w", sandbox.ErrUnsupported)
}

// Checkpoint copies a running sandbox's files into a snapshot.
func (r *Runtime) Checkpoint(ctx context.Context, ref string, o sandbox.CheckpointOptions) (*sandbox.Snapshot, error) {
	if o.Name != "" {
		if err := names.Check(names.Snapshot, o.Name); err != nil {
			return nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSnapshotName, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	if o.Name != "" {
		if _, err := r.snaps.find(ctx, o.Name); err == nil {
			return nil, fmt.Errorf("checkpoint: %w: %s", sandbox.ErrSnapshotNameInUse, o.Name)
		}
	}
	sn := &snapshot{snap: sandbox.Snapshot{ID: newID(32), Durable: true, Name: o.Name, ImageID: b.sb.ImageID, Created: time.Now().UTC(),
		Lineage: sandbox.Lineage{Sandbox: b.sb.ID, SandboxName: b.sb.Name, Parent: b.sb.Snapshot}, Tenant: b.sb.Tenant},
		cfg: b.sb.Config, fs: b.fs.clone()}
	if o.Name != "" {
		sn.snap.Names = []string{o.Name}
	}
	sn.snap.Digest = "sha256:" + sn.snap.ID
	r.snaps.byID[sn.snap.ID] = sn
	if o.Stop {
		r.stop(b, "checkpointed")
	}
	snap := sn.snap
	return &snap, nil
}

// Restore makes a running sandbox from a snapshot, with its files.
func (r *Runtime) Restore(ctx context.Context, snapshot string, o sandbox.RestoreOptions) (*sandbox.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sn, err := r.snaps.find(ctx, snapshot)
	if err != nil {
		return nil, err
	}
	cfg := sn.cfg
	if o.TTL > 0 {
		cfg.TTL = o.TTL
	}
	if o.Labels != nil {
		cfg.Labels = o.Labels
	}
	sb, err := r.add(ctx, o.Name, sn.snap.ImageID, cfg, true, sn.fs.clone())
	if err != nil {
		return nil, err
	}
	r.boxes[sb.ID].sb.Snapshot = sn.snap.ID
	sb.Snapshot = sn.snap.ID
	return sb, nil
}

// Fork makes n running copies of a running sandbox, files and all.
func (r *Runtime) Fork(ctx context.Context, ref string, o sandbox.ForkOptions) ([]*sandbox.Sandbox, error) {
	if o.N < 1 || o.N > sandbox.MaxFork {
		return nil, fmt.Errorf("fork: %w: n must be 1 to %d", sandbox.ErrInvalid, sandbox.MaxFork)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	var out []*sandbox.Sandbox
	for i := range o.N {
		name := ""
		if o.NamePrefix != "" {
			name = fmt.Sprintf("%s-%d", o.NamePrefix, i+1)
		}
		sb, err := r.add(ctx, name, b.sb.Image, b.sb.Config, true, b.fs.clone())
		if err != nil {
			return nil, err
		}
		r.boxes[sb.ID].sb.ForkedFrom = b.sb.ID
		sb.ForkedFrom = b.sb.ID
		out = append(out, sb)
	}
	return out, nil
}

// pool returns the pool name that ctx may see. r.mu is held.
func (r *Runtime) pool(ctx context.Context, name string) (*sandbox.Pool, error) {
	if err := names.Check(names.Pool, name); err != nil {
		return nil, err
	}
	p, ok := r.pools[name]
	if !ok || !tenant.Owns(ctx, p.Tenant) {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrPoolNotFound, name)
	}
	return p, nil
}

// CreatePool records a pool; its members are made when claimed.
func (r *Runtime) CreatePool(ctx context.Context, o sandbox.PoolOptions) (*sandbox.Pool, error) {
	if o.Image == "" {
		o.Image = sandbox.DefaultImage
	}
	if o.Name == "" {
		o.Name = o.Image
	}
	if err := names.Check(names.Pool, o.Name); err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	if o.Size < 0 || o.Size > sandbox.MaxPoolSize {
		return nil, fmt.Errorf("pool: %w: size must be 0 to %d", sandbox.ErrInvalid, sandbox.MaxPoolSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pools[o.Name]; ok {
		return nil, fmt.Errorf("pool %s: %w", o.Name, sandbox.ErrNameInUse)
	}
	p := &sandbox.Pool{Name: o.Name, Image: o.Image, Size: o.Size, Targets: o.Targets, MemoryBudget: o.MemoryBudget, Limits: o.Limits,
		CreatedAt: time.Now().UTC(), Ready: o.Size, TargetsReady: o.Targets, Tenant: tenant.Owner(ctx), Backend: "fake"}
	r.pools[o.Name] = p
	cp := *p
	return &cp, nil
}

func (r *Runtime) Pool(ctx context.Context, name string) (*sandbox.Pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.pool(ctx, name)
	if err != nil {
		return nil, err
	}
	cp := *p
	return &cp, nil
}

// Pools lists the pools ctx may see, by name.
func (r *Runtime) Pools(ctx context.Context) ([]*sandbox.Pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []*sandbox.Pool{}
	for _, p := range r.pools {
		if tenant.Owns(ctx, p.Tenant) {
			cp := *p
			out = append(out, &cp)
		}
	}
	slices.SortFunc(out, func(a, b *sandbox.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// FillPool makes nothing: a fake pool is always full.
func (r *Runtime) FillPool(ctx context.Context, name string) (int, error) {
	_, err := r.Pool(ctx, name)
	return 0, err
}

func (r *Runtime) RemovePool(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.pool(ctx, name); err != nil {
		return err
	}
	delete(r.pools, name)
	return nil
}

// Images holds the one builtin image.
type Images struct{}

var _ sandbox.Images = (*Images)(nil)

// builtin is the image every fake sandbox runs.
var builtin = sandbox.Image{ID: "sha256:" + strings.Repeat("0", 64), Refs: []string{sandbox.DefaultImage}, Source: "builtin", Builtin: true}

func (*Images) Get(_ context.Context, nameOrID string) (*sandbox.Image, error) {
	if nameOrID != sandbox.DefaultImage && nameOrID != builtin.ID {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrImageNotFound, nameOrID)
	}
	img := builtin
	return &img, nil
}

func (*Images) List(context.Context) ([]sandbox.Image, error) { return []sandbox.Image{builtin}, nil }

// Pull reaches no registry.
func (*Images) Pull(_ context.Context, ref string, _ sandbox.PullOptions) (*sandbox.Image, error) {
	return nil, fmt.Errorf("pull %s: %w", ref, sandbox.ErrUnsupported)
}
