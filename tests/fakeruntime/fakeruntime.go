// Package fakeruntime is an in-memory sandbox.Runtime for the servers'
// handler tests: sandboxes, files, snapshots and pools kept in memory, a
// tiny built-in command set instead of a shell, and real tenants
// (runtime/tenant over SQLite), so that those tests run without root or
// runsc.
package fakeruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Runtime keeps sandboxes in memory. Lookups are scoped by the tenant a
// context acts as (tenant.Of), as the real runtime's are, and answer
// another tenant's object as a missing one.
type Runtime struct {
	st      *store.Store
	tenants *tenant.Store
	images  *Images
	snaps   *Snapshots

	mu    sync.Mutex
	boxes map[string]*box // by ID
	// removed are the records of removed sandboxes, so that a lookup
	// says when one was removed rather than that it never existed.
	removed []removal
	pools   map[string]*sandbox.Pool
	subs    map[chan sandbox.Event]subscriber
	vols    map[string]*sandbox.Volume // by owner/name
	volDir  string
}

// subscriber is whose events a subscription gets: owner's, or every
// tenant's when not scoped.
type subscriber struct {
	owner  string
	scoped bool
}

// removal is a removed sandbox's tombstone.
type removal struct {
	sb sandbox.Sandbox
	at time.Time
}

// box is one sandbox: its record and its files.
type box struct {
	sb sandbox.Sandbox
	fs *memFS
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns an empty Runtime whose tenants live in a SQLite database
// in a temporary directory of t's.
func New(t testing.TB) *Runtime {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, err := tenant.Open(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{st: st, tenants: ts, boxes: map[string]*box{}, pools: map[string]*sandbox.Pool{},
		subs: map[chan sandbox.Event]subscriber{}, vols: map[string]*sandbox.Volume{}, volDir: t.TempDir()}
	r.images = &Images{}
	r.snaps = &Snapshots{r: r, byID: map[string]*snapshot{}}
	return r
}

// Store is the database the tenants are in, for handlers that keep their
// own tables (E2B's).
func (r *Runtime) Store() *store.Store { return r.st }

// Images returns the image store.
func (r *Runtime) Images() *Images { return r.images }

// Snapshots returns the snapshot store.
func (r *Runtime) Snapshots() *Snapshots { return r.snaps }

// Tenants returns the tenants.
func (r *Runtime) Tenants() sandbox.Tenants { return r.tenants }

func newID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// find returns the sandbox ref names that ctx may see: the one with that
// ID, else that name, else the one ID it begins. r.mu is held.
func (r *Runtime) find(ctx context.Context, ref string) (*box, error) {
	if err := names.Check(names.Sandbox, ref); err != nil {
		return nil, err
	}
	var named *box
	var prefixed []*box
	for _, b := range r.boxes {
		switch {
		case !tenant.Owns(ctx, b.sb.Tenant):
		case b.sb.ID == ref:
			return b, nil
		case b.sb.Name == ref:
			named = b
		case len(ref) >= 4 && strings.HasPrefix(b.sb.ID, ref):
			prefixed = append(prefixed, b)
		}
	}
	if named != nil {
		return named, nil
	}
	switch len(prefixed) {
	case 1:
		return prefixed[0], nil
	case 0:
		for _, rm := range slices.Backward(r.removed) {
			if tenant.Owns(ctx, rm.sb.Tenant) && (rm.sb.ID == ref || rm.sb.Name == ref) {
				return nil, fmt.Errorf("%w: %q was removed at %s", sandbox.ErrNotFound, ref, rm.at.Format(time.RFC3339))
			}
		}
		return nil, fmt.Errorf("%w: %q never existed", sandbox.ErrNotFound, ref)
	}
	return nil, fmt.Errorf("%w: %q matches more than one sandbox ID", sandbox.ErrNotFound, ref)
}

// running is find for operations that need the sandbox running.
func (r *Runtime) running(ctx context.Context, ref string) (*box, error) {
	b, err := r.find(ctx, ref)
	if err != nil {
		return nil, err
	}
	if b.sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%s: %w: sandbox is %s", b.sb.Name, sandbox.ErrNotRunning, b.sb.State)
	}
	return b, nil
}

// publish sends typ for sb to every subscriber that may see it, never
// blocking. r.mu is held.
func (r *Runtime) publish(typ string, sb *sandbox.Sandbox) {
	r.fanout(sandbox.Event{Type: typ, ID: sb.ID, Name: sb.Name, State: sb.State, Reason: sb.Reason, ExpiresAt: sb.ExpiresAt, Time: time.Now().UTC()}, sb.Tenant)
}

// fanout sends e, of owner's, to every subscriber that may see it. r.mu
// is held.
func (r *Runtime) fanout(e sandbox.Event, owner string) {
	for c, s := range r.subs {
		if s.scoped && s.owner != owner {
			continue
		}
		select {
		case c <- e:
		default:
		}
	}
}

// add makes a sandbox record for ctx's tenant. r.mu is held.
func (r *Runtime) add(ctx context.Context, name, image string, cfg sandbox.Config, start bool, fs *memFS) (*sandbox.Sandbox, error) {
	if name == "" {
		name = "sb-" + newID(6)
	}
	if err := names.Check(names.Sandbox, name); err != nil {
		return nil, err
	}
	for _, b := range r.boxes {
		if b.sb.Name == name {
			return nil, fmt.Errorf("%w: %s", sandbox.ErrNameInUse, name)
		}
	}
	if image == "" {
		image = sandbox.DefaultImage
	}
	img, err := r.images.Get(ctx, image)
	if err != nil {
		return nil, err
	}
	if fs == nil {
		fs = newFS()
	}
	now := time.Now().UTC()
	b := &box{sb: sandbox.Sandbox{ID: newID(6), Name: name, Image: image, ImageID: img.ID, Backend: "fake", State: sandbox.StateCreated,
		Config: cfg, CreatedAt: now, Tenant: tenant.Owner(ctx)}, fs: fs}
	r.boxes[b.sb.ID] = b
	r.publish("created", &b.sb)
	if start {
		r.start(b)
	}
	sb := b.sb
	return &sb, nil
}

// start runs b. r.mu is held.
func (r *Runtime) start(b *box) {
	now := time.Now().UTC()
	b.sb.State, b.sb.StartedAt, b.sb.FinishedAt, b.sb.Reason, b.sb.ExitCode = sandbox.StateRunning, &now, nil, "", nil
	if b.sb.Config.TTL > 0 {
		exp := now.Add(b.sb.Config.TTL)
		b.sb.ExpiresAt = &exp
	}
	r.publish("started", &b.sb)
}

// Create makes a sandbox, from a pool when o.Pool names one.
func (r *Runtime) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := o.Start
	if o.Pool != "" {
		p, err := r.pool(ctx, o.Pool)
		if err != nil {
			return nil, err
		}
		if o.Image == "" {
			o.Image = p.Image
		}
		start = true
	}
	return r.add(ctx, o.Name, o.Image, o.Config, start, nil)
}

// Start starts a sandbox that is not running.
func (r *Runtime) Start(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(b *box) error {
		if b.sb.State == sandbox.StateRunning || b.sb.State == sandbox.StatePaused {
			return fmt.Errorf("start %s: %w: it is %s", b.sb.Name, sandbox.ErrState, b.sb.State)
		}
		r.start(b)
		return nil
	})
}

// Stop stops a sandbox at once (nothing runs to be given a grace).
func (r *Runtime) Stop(ctx context.Context, ref string, _ time.Duration) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(b *box) error {
		r.stop(b, "stopped")
		return nil
	})
}

// stop ends b. r.mu is held.
func (r *Runtime) stop(b *box, reason string) {
	if b.sb.State != sandbox.StateRunning && b.sb.State != sandbox.StatePaused {
		return
	}
	now, code := time.Now().UTC(), 137
	b.sb.State, b.sb.FinishedAt, b.sb.Reason, b.sb.ExitCode = sandbox.StateStopped, &now, reason, &code
	r.publish("stopped", &b.sb)
}

// change applies fn to the sandbox ref names and returns its record.
func (r *Runtime) change(ctx context.Context, ref string, fn func(*box) error) (*sandbox.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.find(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := fn(b); err != nil {
		return nil, err
	}
	sb := b.sb
	return &sb, nil
}

// Remove deletes a sandbox; a running one needs force.
func (r *Runtime) Remove(ctx context.Context, ref string, force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.find(ctx, ref)
	if err != nil {
		return err
	}
	if b.sb.State == sandbox.StateRunning && !force {
		return fmt.Errorf("remove %s: %w: it is running (force removes it)", b.sb.Name, sandbox.ErrState)
	}
	delete(r.boxes, b.sb.ID)
	r.removed = append(r.removed, removal{sb: b.sb, at: time.Now().UTC()})
	r.publish("removed", &b.sb)
	return nil
}

// Get returns a sandbox's record.
func (r *Runtime) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(*box) error { return nil })
}

// List returns the sandboxes ctx may see, by name.
func (r *Runtime) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*sandbox.Sandbox
	for _, b := range r.boxes {
		if tenant.Owns(ctx, b.sb.Tenant) {
			sb := b.sb
			out = append(out, &sb)
		}
	}
	slices.SortFunc(out, func(a, b *sandbox.Sandbox) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// SetTTL gives a sandbox a new time to live from now; 0 is none.
func (r *Runtime) SetTTL(ctx context.Context, ref string, ttl time.Duration) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(b *box) error {
		b.sb.Config.TTL, b.sb.ExpiresAt = ttl, nil
		if ttl > 0 {
			exp := time.Now().UTC().Add(ttl)
			b.sb.ExpiresAt = &exp
		}
		r.publish("ttl", &b.sb)
		return nil
	})
}

// Stats says whether the sandbox runs; it uses nothing.
func (r *Runtime) Stats(ctx context.Context, ref string) (*sandbox.Stats, error) {
	sb, err := r.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &sandbox.Stats{ProcessesAlive: sb.State == sandbox.StateRunning}, nil
}

// Logs writes nothing: the fake's sandboxes run no main process.
func (r *Runtime) Logs(ctx context.Context, ref string, _ sandbox.LogOptions) error {
	_, err := r.Get(ctx, ref)
	return err
}

// CopyIn and CopyOut name host paths, which the fake has no business
// with: the servers never call them.
func (r *Runtime) CopyIn(ctx context.Context, ref, src, dst string) error {
	return fmt.Errorf("cp: %w", sandbox.ErrUnsupported)
}

func (r *Runtime) CopyOut(ctx context.Context, ref, src, dst string) error {
	return fmt.Errorf("cp: %w", sandbox.ErrUnsupported)
}

// FS returns the running sandbox's in-memory file system.
func (r *Runtime) FS(ctx context.Context, ref string) (sandbox.FS, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	return b.fs, nil
}

// ReadFile streams one file out of a running sandbox.
func (r *Runtime) ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	fs, err := r.FS(ctx, ref)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(fs.ReadFile(ctx, path, pw)) }()
	return pr, nil
}

// WriteFile creates or replaces one file in a running sandbox.
func (r *Runtime) WriteFile(ctx context.Context, ref, path string, rd io.Reader) error {
	fs, err := r.FS(ctx, ref)
	if err != nil {
		return err
	}
	_, err = fs.WriteFile(ctx, path, rd)
	return err
}

// Pause freezes a running sandbox; Resume thaws it.
func (r *Runtime) Pause(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return r.flip(ctx, ref, sandbox.StateRunning, sandbox.StatePaused, "pause", "paused")
}

func (r *Runtime) Resume(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return r.flip(ctx, ref, sandbox.StatePaused, sandbox.StateRunning, "resume", "running")
}

func (r *Runtime) flip(ctx context.Context, ref string, from, to sandbox.State, op, event string) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(b *box) error {
		if b.sb.State != from {
			return fmt.Errorf("%s %s: %w: it is %s", op, b.sb.Name, sandbox.ErrState, b.sb.State)
		}
		b.sb.State = to
		r.publish(event, &b.sb)
		return nil
	})
}

// networked returns the sandbox ref names if it has a network of its
// own, as the real runtime's do.
func (r *Runtime) networked(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	sb, err := r.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.Config.Network == nil {
		return nil, fmt.Errorf("%s: %w: it was created with --net none, which has no network to police", sb.Name, sandbox.ErrState)
	}
	return sb, nil
}

// NetStatus says what the sandbox may reach (its policy); it is bound to
// no address.
func (r *Runtime) NetStatus(ctx context.Context, ref string) (*sandbox.NetworkState, error) {
	sb, err := r.networked(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &sandbox.NetworkState{Network: *sb.Config.Network}, nil
}

// NetEvents has nothing to report: nothing was denied.
func (r *Runtime) NetEvents(ctx context.Context, ref string) ([]sandbox.NetworkEvent, error) {
	if _, err := r.networked(ctx, ref); err != nil {
		return nil, err
	}
	return []sandbox.NetworkEvent{}, nil
}

// NetUpdate replaces a running sandbox's policy, its published ports
// kept.
func (r *Runtime) NetUpdate(ctx context.Context, ref string, n sandbox.Network) (*sandbox.Sandbox, error) {
	return r.change(ctx, ref, func(b *box) error {
		switch {
		case b.sb.Config.Network == nil:
			return fmt.Errorf("net update %s: %w: it was created with --net none; networks are set up at create", b.sb.Name, sandbox.ErrState)
		case b.sb.State != sandbox.StateRunning:
			return fmt.Errorf("net update %s: %w: sandbox is %s", b.sb.Name, sandbox.ErrNotRunning, b.sb.State)
		}
		n.Ports = nil
		if err := n.Validate(); err != nil {
			return fmt.Errorf("net update %s: %w: %w", b.sb.Name, sandbox.ErrInvalid, err)
		}
		n.Ports = b.sb.Config.Network.Ports
		b.sb.Config.Network = &n
		return nil
	})
}

// PutArchive and GetArchive move trees as tar streams.
func (r *Runtime) PutArchive(ctx context.Context, ref, dst string, rd io.Reader) error {
	fs, err := r.FS(ctx, ref)
	if err != nil {
		return err
	}
	return fs.(*memFS).putTar(dst, rd)
}

func (r *Runtime) GetArchive(ctx context.Context, ref, src string, w io.Writer) error {
	fs, err := r.FS(ctx, ref)
	if err != nil {
		return err
	}
	return fs.(*memFS).getTar(src, w)
}

// errNoNetwork answers every dial: the fake's sandboxes listen on nothing.
var errNoNetwork = fmt.Errorf("%w: the fake runtime has no network", sandbox.ErrUnsupported)

func (r *Runtime) DialPort(ctx context.Context, ref string, _ int) (net.Conn, error) {
	if _, err := r.FS(ctx, ref); err != nil {
		return nil, err
	}
	return nil, errNoNetwork
}

func (r *Runtime) DialPublished(context.Context, string, string) (net.Conn, error) {
	return nil, errNoNetwork
}

// Subscribe returns the events from now on of the sandboxes ctx may see.
func (r *Runtime) Subscribe(ctx context.Context) (<-chan sandbox.Event, func()) {
	c := make(chan sandbox.Event, 256)
	owner, scoped := tenant.Of(ctx)
	r.mu.Lock()
	r.subs[c] = subscriber{owner: owner, scoped: scoped}
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.subs[c]; ok {
			delete(r.subs, c)
			close(c)
		}
	}
}

// Publish sends an event that is not a sandbox's to ctx's tenant.
func (r *Runtime) Publish(ctx context.Context, e sandbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fanout(e, tenant.Owner(ctx))
}

// Account has nothing to measure.
func (r *Runtime) Account(context.Context) error { return nil }

// Usage reports no use.
func (r *Runtime) Usage(context.Context, time.Time, string, string) ([]sandbox.Usage, error) {
	return []sandbox.Usage{}, nil
}

// Reap removes nothing: the fake's sandboxes never expire.
func (r *Runtime) Reap(context.Context, time.Duration) ([]string, error) { return nil, nil }

// SnapshotInUse reports whether a sandbox was restored from snapshot id.
func (r *Runtime) SnapshotInUse(_ context.Context, id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.boxes {
		if b.sb.Snapshot == id {
			return true, nil
		}
	}
	return false, nil
}
