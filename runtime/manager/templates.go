package manager

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Templates are an image plus, optionally, a started state: a checkpoint
// of a sandbox of the image whose start command (its main process) passed
// its ready check. Create given a template's name restores that
// checkpoint, so the server is up in a restore's time; a template without
// a start command creates a sandbox of its image. A tenant sees its own
// templates and the public ones (which only the admin makes).

// logTail is how much of a failed start command's output an error shows.
const logTail = 2048

// BuildTemplate makes (or replaces) the template o.Name of ctx's tenant.
func (m *Manager) BuildTemplate(ctx context.Context, o sandbox.TemplateOptions) (*sandbox.Template, error) {
	if err := names.Check(names.Template, o.Name); err != nil {
		return nil, fmt.Errorf("build template: %w", err)
	}
	if _, scoped := tenant.Of(ctx); scoped && o.Public {
		return nil, fmt.Errorf("build template %s: public: %w", o.Name, tenant.ErrAdminOnly)
	}
	if len(o.Start) == 0 && o.Ready != (sandbox.Ready{}) {
		return nil, fmt.Errorf("build template %s: %w: a ready check needs a start command", o.Name, sandbox.ErrInvalid)
	}
	if err := o.Ready.Check(); err != nil {
		return nil, fmt.Errorf("build template %s: %w", o.Name, err)
	}
	if o.Hot != 0 && len(o.Start) == 0 {
		return nil, fmt.Errorf("build template %s: %w: hot copies need a start command", o.Name, sandbox.ErrInvalid)
	}
	ref := cmp.Or(o.Image, sandbox.DefaultImage)
	img, err := m.images.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("build template %s: image %w", o.Name, err)
	}
	t := &sandbox.Template{Name: o.Name, Tenant: tenant.Owner(ctx), Public: o.Public, Image: ref, ImageID: img.ID,
		Start: o.Start, Env: o.Env, WorkDir: o.WorkDir, User: o.User}
	t.Built, t.Build = store.Now(), cmp.Or(o.Build, newBuildID())
	if len(o.Start) > 0 {
		t.Ready = o.Ready
		snap, after, err := m.startedState(ctx, o, img.ID)
		if err != nil {
			return nil, fmt.Errorf("build template %s: %w", o.Name, err)
		}
		t.Snapshot, t.ReadyAfter = snap, after
	}
	if o.Hot != 0 {
		t.Hot = o.Hot
		if err := m.fillHot(ctx, t); err != nil {
			m.dropState(ctx, t)
			return nil, fmt.Errorf("build template %s: %w", o.Name, err)
		}
	}
	if err := m.saveTemplate(ctx, t); err != nil {
		m.dropState(ctx, t)
		return nil, fmt.Errorf("build template %s: %w", o.Name, err)
	}
	logf(o.Log, "template %s: built", t.Name)
	return t, nil
}

// TagTemplate makes (or replaces) the template to of ctx's tenant a copy
// of from, the same build under another name (E2B's tags).
func (m *Manager) TagTemplate(ctx context.Context, from, to string) (*sandbox.Template, error) {
	if err := names.Check(names.Template, to); err != nil {
		return nil, fmt.Errorf("tag template: %w", err)
	}
	t, err := m.Template(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("tag %w", err)
	}
	if !tenant.Owns(ctx, t.Tenant) {
		return nil, fmt.Errorf("tag template %s: it is public: %w", from, tenant.ErrAdminOnly)
	}
	t.Name, t.Hot = to, 0 // the pool stays its source's
	if err := m.saveTemplate(ctx, t); err != nil {
		return nil, fmt.Errorf("tag template %s: %w", from, err)
	}
	return t, nil
}

// saveTemplate writes t as its tenant's template of that name; the
// started state of the one it replaces goes unless another uses it.
func (m *Manager) saveTemplate(ctx context.Context, t *sandbox.Template) error {
	old, err := m.ownTemplate(ctx, t.Tenant, t.Name)
	if err != nil && !errors.Is(err, sandbox.ErrTemplateNotFound) {
		return err
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = m.st.DB().ExecContext(ctx, `INSERT INTO templates (tenant, name, public, snapshot, image_id, doc) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, name) DO UPDATE SET public = excluded.public, snapshot = excluded.snapshot, image_id = excluded.image_id, doc = excluded.doc`,
		t.Tenant, t.Name, t.Public, t.Snapshot, t.ImageID, string(doc))
	if err != nil {
		return err
	}
	if old != nil && old.Snapshot != t.Snapshot {
		m.dropState(ctx, old)
	}
	return nil
}

// fillHot makes t's hot pool and fills it.
func (m *Manager) fillHot(ctx context.Context, t *sandbox.Template) error {
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: t.HotPool(), From: t.Snapshot, Hot: t.Hot}); err != nil {
		return err
	}
	if _, err := m.FillPool(ctx, t.HotPool()); err != nil && !errors.Is(err, sandbox.ErrPoolBudget) {
		return err
	}
	return nil
}

// startedState runs o's start command in a sandbox of the image imageID,
// waits for o.Ready, and checkpoints it; the sandbox is removed either
// way. It returns the snapshot's ID and how long the start took.
func (m *Manager) startedState(ctx context.Context, o sandbox.TemplateOptions, imageID string) (string, time.Duration, error) {
	if err := m.rate(ctx, 1); err != nil {
		return "", 0, err
	}
	logf(o.Log, "start: %q", o.Start)
	sb, err := m.create(ctx, sandbox.CreateOptions{Image: imageID, Start: true, Backend: o.Backend,
		Config: sandbox.Config{Cmd: o.Start, Env: o.Env, WorkDir: o.WorkDir, User: o.User, Limits: o.Limits}}, "", "")
	if err != nil {
		return "", 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		m.Remove(cctx, sb.ID, true)
	}()
	begun := time.Now()
	if err := m.waitReady(ctx, sb.ID, o.Ready); err != nil {
		var out bytes.Buffer
		m.Logs(context.WithoutCancel(ctx), sb.ID, sandbox.LogOptions{Stdout: &out, Stderr: &out})
		tail := out.Bytes()[max(0, out.Len()-logTail):]
		if o.Log != nil {
			o.Log.Write(out.Bytes())
		}
		return "", 0, fmt.Errorf("%w; its output ends: %q", err, tail)
	}
	after := time.Since(begun)
	logf(o.Log, "ready after %s; checkpoint", after.Round(time.Millisecond))
	snap, err := m.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{Stop: true})
	if err != nil {
		return "", 0, err
	}
	return snap.ID, after, nil
}

// waitReady polls r's checks on the sandbox id until all pass, its main
// process (the start command) ends, or r.Timeout passes.
func (m *Manager) waitReady(ctx context.Context, id string, r sandbox.Ready) error {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	begun := time.Now()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, port, err := r.URLPort()
			if err != nil {
				return nil, err
			}
			return m.DialPort(ctx, id, port)
		}}}
	defer hc.CloseIdleConnections()
	var last error
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 250*time.Millisecond) {
		if last = m.readyOnce(ctx, id, r, hc, time.Since(begun)); last == nil {
			return nil
		}
		if sb, err := m.Get(ctx, id); err == nil && sb.State != sandbox.StateRunning {
			return fmt.Errorf("%w: the start command ended (sandbox %s %s)", sandbox.ErrNotReady, sb.State, sb.Reason)
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%w within %s: %v", sandbox.ErrNotReady, r.Timeout, last)
			}
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// readyOnce runs each of r's checks once; nil means all passed.
func (m *Manager) readyOnce(ctx context.Context, id string, r sandbox.Ready, hc *http.Client, since time.Duration) error {
	if since < r.After {
		return fmt.Errorf("%s of %s passed", since.Round(time.Millisecond), r.After)
	}
	if r.Port != 0 {
		c, err := m.DialPort(ctx, id, r.Port)
		if err != nil {
			return err
		}
		c.Close()
	}
	if r.URL != "" {
		resp, err := hc.Get(r.URL)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != r.Status {
			return fmt.Errorf("%s answered %d, want %d", r.URL, resp.StatusCode, r.Status)
		}
	}
	if r.File != "" {
		// The stream's first read says whether the file is there.
		f, err := m.ReadFile(ctx, id, r.File)
		if err != nil {
			return err
		}
		_, err = f.Read(make([]byte, 1))
		f.Close()
		if err != nil && err != io.EOF {
			return err
		}
	}
	var cmds [][]string
	if r.Process != "" {
		cmds = append(cmds, []string{"pgrep", r.Process})
	}
	if r.Cmd != "" {
		cmds = append(cmds, []string{"/bin/sh", "-c", r.Cmd})
	}
	for _, args := range cmds {
		ex, err := m.Exec(ctx, id, sandbox.Process{Args: args, TimeoutMS: 10_000}, sandbox.Stdio{})
		if err != nil {
			return err
		}
		if ex.Code != 0 || ex.Kind != "" {
			return fmt.Errorf("%q: exit code %d %s", args, ex.Code, ex.Error)
		}
	}
	return nil
}

// Template returns the template name as ctx's tenant sees it: its own
// first, then a public one.
func (m *Manager) Template(ctx context.Context, name string) (*sandbox.Template, error) {
	if err := names.Check(names.Template, name); err != nil {
		return nil, err
	}
	owner, scoped := tenant.Of(ctx)
	t, err := store.Doc[sandbox.Template](ctx, m.st.DB(), sandbox.ErrTemplateNotFound,
		`SELECT doc FROM templates WHERE name = ? AND (NOT ? OR tenant = ? OR public) ORDER BY tenant = ? DESC, public DESC, tenant LIMIT 1`,
		name, scoped, owner, owner)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return t, nil
}

// ownTemplate returns owner's template name.
func (m *Manager) ownTemplate(ctx context.Context, owner, name string) (*sandbox.Template, error) {
	return store.Doc[sandbox.Template](ctx, m.st.DB(), sandbox.ErrTemplateNotFound,
		`SELECT doc FROM templates WHERE tenant = ? AND name = ?`, owner, name)
}

// Templates lists the templates ctx's tenant sees (every one, unscoped),
// by name.
func (m *Manager) Templates(ctx context.Context) ([]*sandbox.Template, error) {
	owner, scoped := tenant.Of(ctx)
	ts, err := store.Docs[sandbox.Template](ctx, m.st.DB(),
		`SELECT doc FROM templates WHERE NOT ? OR tenant = ? OR public ORDER BY name, tenant`, scoped, owner)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return ts, nil
}

// RemoveTemplate removes a template of ctx's tenant and its started
// state's snapshot, unless sandboxes restored from it still exist: that
// snapshot then stays (snapshot ls lists it) until snapshot rm.
func (m *Manager) RemoveTemplate(ctx context.Context, name string) error {
	t, err := m.Template(ctx, name)
	if err != nil {
		return fmt.Errorf("remove %w", err)
	}
	if !tenant.Owns(ctx, t.Tenant) {
		return fmt.Errorf("remove template %s: it is public: %w", name, tenant.ErrAdminOnly)
	}
	if _, err := m.st.DB().ExecContext(ctx, `DELETE FROM templates WHERE tenant = ? AND name = ?`, t.Tenant, t.Name); err != nil {
		return fmt.Errorf("remove template %s: %w", name, err)
	}
	m.dropState(ctx, t)
	return nil
}

// dropState removes t's hot pool and its started state's snapshot,
// unless a sandbox restored from it still depends on it.
func (m *Manager) dropState(ctx context.Context, t *sandbox.Template) {
	if t.Hot != 0 {
		m.RemovePool(ctx, t.HotPool())
	}
	if t.Snapshot == "" {
		return
	}
	id := t.Snapshot
	// An error (in use, already gone) leaves it to snapshot rm: nothing
	// of a template depends on it any more.
	uctx := tenant.Unscoped(ctx)
	m.snaps.Remove(uctx, id, func(id string) (bool, error) { return m.SnapshotInUse(uctx, id) })
}

// fromTemplate creates a sandbox from t: a restore of its started state,
// or a sandbox of its image. o's environment is added to the template's;
// o's name, time to live and labels are the copy's.
func (m *Manager) fromTemplate(ctx context.Context, t *sandbox.Template, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	if t.Snapshot == "" {
		o.Image = t.ImageID
		o.Config.Env = guest.MergeEnv(t.Env, o.Config.Env)
		o.Config.WorkDir = cmp.Or(o.Config.WorkDir, t.WorkDir)
		o.Config.User = cmp.Or(o.Config.User, t.User)
		if err := m.rate(ctx, 1); err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		return m.create(ctx, o, "", "")
	}
	switch {
	case !o.Start:
		return nil, fmt.Errorf("create: %w: template %s has a started state: its sandboxes start running (run it, or create and start at once)", sandbox.ErrInvalid, t.Name)
	case len(o.Config.Cmd) > 0:
		return nil, fmt.Errorf("create: %w: template %s has a started state: its main process is its start command, %q", sandbox.ErrInvalid, t.Name, t.Start)
	}
	if drops := restoreDrops(o.Config); len(drops) > 0 {
		return nil, fmt.Errorf("create: %w: template %s has a started state, which a copy restores as it was built: it cannot take %s (make a template without a start command, or build one with them)", sandbox.ErrInvalid, t.Name, strings.Join(drops, ", "))
	}
	snapCtx := ctx
	if !tenant.Owns(ctx, t.Tenant) {
		snapCtx = tenant.Unscoped(ctx) // a public template: the admin's snapshot
	}
	return m.restore(ctx, snapCtx, t.Snapshot, sandbox.RestoreOptions{Name: o.Name, TTL: o.Config.TTL, Labels: o.Config.Labels}, o.Config.Env)
}

// restoreDrops names what c asks for that a restore of a started state
// cannot give: the copy runs in the state's sandbox, with its network,
// mounts, limits, identity and lifecycle. Silently dropping them once
// gave a volume-less, unlimited copy to a create that asked for both.
func restoreDrops(c sandbox.Config) []string {
	var drops []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"a network", c.Network.Enabled()},
		{"volumes", len(c.Volumes) > 0},
		{"limits", c.Limits != (sandbox.Limits{})},
		{"a hostname", c.Hostname != ""},
		{"a working directory", c.WorkDir != ""},
		{"a user", c.User != ""},
		{"a trust policy", c.TrustRepo != ""},
		{"an idle timeout", c.IdleTimeout != 0},
		{"pause on expiry", c.OnExpiry == sandbox.ExpiryPause},
	} {
		if f.set {
			drops = append(drops, f.name)
		}
	}
	return drops
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
