package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/e2b"
)

// cluster is the runtime that server/httpapi (a sandbox.Runtime) and
// server/e2b (an e2b.Runtime) serve over in front of a cluster. What changes a sandbox's life goes through
// its Sandbox object (made, patched, deleted, snapshotted as SandboxSnapshots);
// the rest about one sandbox (exec, files, logs, stats, network, time to
// live) is asked of the smolvm serve of the node that holds it, through
// the Go client with the nodes' token. What a cluster has no sense for
// (start and stop, pools made by API, images, tenants made by API, usage,
// volumes, templates) is errdefs.ErrUnsupported, which the servers answer
// with 501.
//
// Every call acts in the namespace the gateway's key resolved to
// (withNamespace); a call without one is refused rather than scoped to
// every namespace, but for a lookup by exact ID (lookup), which server/e2b
// makes only for a request holding that sandbox's token.
type cluster struct {
	g *Gateway
	// nodes are the clients of the nodes' smolvm serve by endpoint, so
	// that calls to a node share its connections.
	mu    sync.Mutex
	nodes map[string]*client.Client
}

var (
	_ sandbox.Runtime = (*cluster)(nil)
	_ e2b.Runtime     = (*cluster)(nil)
)

func newCluster(g *Gateway) *cluster { return &cluster{g: g, nodes: map[string]*client.Client{}} }

// unsupported is what the cluster does not serve, and why.
func unsupported(what, why string) error {
	return errdefs.New(errdefs.ErrUnsupported, what+" is not served by the cluster gateway: "+why)
}

// ns is the namespace ctx acts in.
func ns(ctx context.Context) (string, error) {
	n := namespace(ctx)
	if n == "" {
		return "", errdefs.New(errdefs.ErrDenied, "no namespace: the request carried no gateway key")
	}
	return n, nil
}

// client returns the client of the node at base.
func (c *cluster) client(base *url.URL) (*client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.nodes[base.String()]; ok {
		return cl, nil
	}
	cl, err := client.New(base.String(), c.g.cfg.NodeToken)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", base.Host, err)
	}
	c.nodes[base.String()] = cl
	return cl, nil
}

// nodeOf returns the client of the node holding sb.
func (c *cluster) nodeOf(ctx context.Context, sb *v1alpha1.Sandbox) (*client.Client, error) {
	base, err := c.g.node(ctx, sb)
	if err != nil {
		return nil, nodeError(err)
	}
	return c.client(base)
}

// on finds the sandbox ref names in ctx's namespace: its object, the ID
// of its smolvm sandbox and the client of its node.
func (c *cluster) on(ctx context.Context, ref string) (*v1alpha1.Sandbox, string, *client.Client, error) {
	sb, id, err := c.lookup(ctx, ref)
	if err != nil {
		return nil, "", nil, err
	}
	cl, err := c.nodeOf(ctx, sb)
	if err != nil {
		return nil, "", nil, err
	}
	return sb, id, cl, nil
}

// get answers with the node's view of sb's sandbox id.
func (c *cluster) get(ctx context.Context, sb *v1alpha1.Sandbox, id string) (*sandbox.Sandbox, error) {
	cl, err := c.nodeOf(ctx, sb)
	if err != nil {
		return nil, err
	}
	got, err := cl.Get(ctx, id)
	return owned(sb, got, err)
}

// owned is s, sb's sandbox on its node, as the cluster's: its tenant is
// sb's namespace, which server/e2b holds a key's requests to.
func owned(sb *v1alpha1.Sandbox, s *sandbox.Sandbox, err error) (*sandbox.Sandbox, error) {
	if err != nil {
		return nil, err
	}
	s.Tenant = sb.Namespace
	return s, nil
}

// nodeError is a lookup's, a wait's or a write's error as both servers
// take it: the native API's answer (errorFor passes an *api.Error on as
// it is), and its class, by which server/e2b answers (errdefs.Class). A
// code that is a class's name is that class too, so that the Go client's
// errors.Is holds as against a single smolvm serve.
func nodeError(err error) error {
	if errors.Is(err, errQuota) {
		// As a single smolvm serve answers a tenant over its quota.
		return &classed{&api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Class: errdefs.Name(errdefs.ErrQuota), Message: err.Error()}, errdefs.ErrQuota}
	}
	status := statusOf(err)
	code := map[int]string{
		http.StatusBadRequest: api.CodeInvalid, http.StatusNotFound: api.CodeNotFound, http.StatusConflict: api.CodeConflict,
		http.StatusForbidden: api.CodeDenied, http.StatusUnprocessableEntity: api.CodeCannotStart, http.StatusServiceUnavailable: api.CodeUnavailable,
	}[status]
	if code == "" {
		code = api.CodeInternal
	}
	e := &classed{ae: &api.Error{Status: status, Code: code, Message: err.Error()}, class: errdefs.Parse(code)}
	if e.class != nil {
		e.ae.Class = code
	}
	return e
}

// classed is an answer of the native API and its error class (nil for
// none).
type classed struct {
	ae    *api.Error
	class error
}

func (e *classed) Error() string { return e.ae.Message }

func (e *classed) Unwrap() []error {
	if e.class == nil {
		return []error{e.ae}
	}
	return []error{e.ae, e.class}
}

// spec is the Sandbox o asks for; what a node cannot be told through a
// Sandbox is refused by name.
func (c *cluster) spec(o sandbox.CreateOptions) (v1alpha1.SandboxSpec, error) {
	var spec v1alpha1.SandboxSpec
	cfg := o.Config
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"hostname", cfg.Hostname != ""}, {"idle_timeout", cfg.IdleTimeout != 0},
		{"on_expiry", cfg.OnExpiry != "" && cfg.OnExpiry != sandbox.ExpiryStop}, {"policy", cfg.TrustRepo != ""},
		{"start", !o.Start}, {"volumes", len(cfg.Volumes) > 0},
	} {
		if f.set {
			return spec, errdefs.New(errdefs.ErrInvalid, f.name+": not served by the cluster gateway")
		}
	}
	if o.Image == "" {
		return spec, errdefs.New(errdefs.ErrInvalid, "image: required")
	}
	spec.Image, spec.Command, spec.WorkingDir, spec.User, spec.Backend = o.Image, cfg.Cmd, cfg.WorkDir, cfg.User, o.Backend
	spec.Labels = cfg.Labels
	var err error
	if spec.Env, err = env(cfg.Env); err != nil {
		return spec, err
	}
	l := cfg.Limits
	if l.CPUs < 0 || l.Memory < 0 || l.Disk < 0 || l.Pids < 0 {
		return spec, errdefs.New(errdefs.ErrInvalid, "cpus, memory, disk, pids: must not be negative")
	}
	if l != (sandbox.Limits{}) {
		res := &v1alpha1.Resources{}
		if l.CPUs > 0 {
			res.CPU = resource.NewMilliQuantity(int64(l.CPUs*1000), resource.DecimalSI)
		}
		if l.Memory > 0 {
			res.Memory = resource.NewQuantity(l.Memory, resource.BinarySI)
		}
		if l.Disk > 0 {
			res.Disk = resource.NewQuantity(l.Disk, resource.BinarySI)
		}
		if l.Pids > 0 {
			res.Pids = ptr.To(l.Pids)
		}
		spec.Resources = res
	}
	spec.Network = networkPolicy(cfg.Network)
	if cfg.TTL < 0 {
		return spec, errdefs.New(errdefs.ErrInvalid, "timeout: must not be negative")
	}
	spec.TTLSeconds = ptr.To(int64(cfg.TTL / time.Second))
	return spec, nil
}

// env is NAME=VALUE pairs as a Sandbox's.
func env(pairs []string) ([]v1alpha1.EnvVar, error) {
	var out []v1alpha1.EnvVar
	for _, e := range pairs {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("env: %q is not NAME=VALUE", e))
		}
		out = append(out, v1alpha1.EnvVar{Name: k, Value: v})
	}
	return out, nil
}

func (c *cluster) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	if o.Pool != "" {
		return c.claim(ctx, n, o)
	}
	// A template wins over an image of the same name, as on a single serve.
	switch t, err := c.templateObject(ctx, n, o.Image); {
	case err == nil:
		return c.fromTemplate(ctx, n, t, o)
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	spec, err := c.spec(o)
	if err != nil {
		return nil, err
	}
	if err := c.notImage(ctx, n, o.Image); err != nil {
		return nil, err
	}
	return c.createNamed(ctx, n, o.Name, spec)
}

// notImage refuses, as ErrImageNotFound, an image that a SandboxSnapshot
// or one of E2B's default templates is named after: no node has such an
// image, and on that error E2B's create restores the snapshot or makes the
// builtin image (server/e2b's fromTemplate), rather than a Sandbox whose
// node pulls the name from a registry. (A SandboxTemplate's name is taken
// before: Create.)
func (c *cluster) notImage(ctx context.Context, ns, image string) error {
	switch _, err := c.g.snapshot(ctx, ns, image); {
	case err == nil:
		return fmt.Errorf("%w: %q names a snapshot", sandbox.ErrImageNotFound, image)
	case !errors.Is(err, errNotFound):
		return nodeError(err)
	}
	if image == e2bapi.DefaultTemplate || image == e2bapi.CodeInterpreterTemplate {
		return fmt.Errorf("%w: %q is E2B's template, not an image", sandbox.ErrImageNotFound, image)
	}
	return nil
}

// claim answers a create from a warm pool: one of its ready sandboxes,
// given the request's time to live, or else a fresh one made as the pool
// makes its own. A request with env, labels or a network, which a
// pooled sandbox was made without, gets a fresh one with them.
func (c *cluster) claim(ctx context.Context, n string, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	cfg := o.Config
	if o.Name != "" || o.Image != "" || len(cfg.Cmd) > 0 {
		return nil, errdefs.New(errdefs.ErrInvalid, "pool: a pool's sandboxes are made before the claim; name, image and cmd cannot be given with it")
	}
	pool, err := c.g.pool(ctx, n, o.Pool)
	if err == nil && pool == nil {
		err = fmt.Errorf("warm pool %q: %w", o.Pool, errNotFound)
	}
	if err != nil {
		return nil, nodeError(err)
	}
	var sb *v1alpha1.Sandbox
	if len(cfg.Env) == 0 && len(cfg.Labels) == 0 && cfg.Network == nil {
		if sb, err = c.g.claim(ctx, pool); err != nil {
			return nil, nodeError(err)
		}
	}
	if sb == nil {
		spec := pool.Spec.Member()
		spec.TTLSeconds = ptr.To(int64(cfg.TTL / time.Second))
		if spec.Env, err = env(cfg.Env); err != nil {
			return nil, err
		}
		spec.Labels, spec.Network = cfg.Labels, networkPolicy(cfg.Network)
		if sb, err = c.g.create(ctx, n, "", pool.Name+"-", spec, nil); err != nil {
			return nil, nodeError(err)
		}
		return c.get(ctx, sb, sb.Status.Instances[0].ID)
	}
	id := sb.Status.Instances[0].ID
	cl, err := c.nodeOf(ctx, sb)
	if err != nil {
		return nil, err
	}
	if _, err := cl.SetTTL(ctx, id, cfg.TTL); err != nil {
		return nil, fmt.Errorf("set the claimed sandbox's time to live on its node: %w", err)
	}
	if pool.Spec.Hot {
		// Resumed here rather than left to the node's reconcile of the
		// claim, so that the answer is a running sandbox; a conflict is
		// that reconcile having done it first.
		if _, err := cl.Resume(ctx, id); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return nil, fmt.Errorf("resume the claimed sandbox on its node: %w", err)
		}
	}
	got, err := cl.Get(ctx, id)
	return owned(sb, got, err)
}

func (c *cluster) Start(context.Context, string) (*sandbox.Sandbox, error) {
	return nil, unsupported("start", "a Sandbox runs until deleted (pause and resume are served)")
}

func (c *cluster) Stop(context.Context, string, time.Duration) (*sandbox.Sandbox, error) {
	return nil, unsupported("stop", "a Sandbox runs until deleted (pause and resume are served)")
}

// Remove deletes the sandbox's object; a running one is removed whatever
// force says, as the object's deletion is.
func (c *cluster) Remove(ctx context.Context, ref string, _ bool) error {
	sb, _, err := c.lookup(ctx, ref)
	if err != nil {
		return err
	}
	if err := c.g.remove(ctx, sb); err != nil {
		return nodeError(err)
	}
	return nil
}

// lookup finds the object ref names in ctx's namespace, and the ID of
// its smolvm sandbox. A request with no namespace came with a token of
// the sandbox (server/e2b's envd and ports), which names it by its exact
// ID, in whichever namespace holds it.
func (c *cluster) lookup(ctx context.Context, ref string) (*v1alpha1.Sandbox, string, error) {
	var sb *v1alpha1.Sandbox
	var err error
	if n := namespace(ctx); n != "" {
		sb, err = c.g.lookup(ctx, n, ref)
	} else {
		sb, err = c.g.byID(ctx, ref)
	}
	if err != nil {
		return nil, "", nodeError(err)
	}
	return sb, instance(sb, ref), nil
}

func (c *cluster) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	sb, id, err := c.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	return c.get(ctx, sb, id)
}

// List asks each node holding the namespace's sandboxes for its list and
// keeps the namespace's.
func (c *cluster) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	out := []*sandbox.Sandbox{}
	err = c.g.eachNode(ctx, n, func(base *url.URL, ids map[string]*v1alpha1.Sandbox) error {
		cl, err := c.client(base)
		if err != nil {
			return err
		}
		all, err := cl.List(ctx)
		if err != nil {
			return err
		}
		for _, sb := range all {
			if obj := ids[sb.ID]; obj != nil {
				sb.Tenant = obj.Namespace
				out = append(out, sb)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nodeError(err)
	}
	return out, nil
}

func (c *cluster) SetTTL(ctx context.Context, ref string, ttl time.Duration) (*sandbox.Sandbox, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.SetTTL(ctx, id, ttl)
}

func (c *cluster) Stats(ctx context.Context, ref string) (*sandbox.Stats, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.Stats(ctx, id)
}

func (c *cluster) Exec(ctx context.Context, ref string, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return sandbox.Exit{}, err
	}
	return cl.Exec(ctx, id, p, stdio)
}

// CopyIn and CopyOut name paths on the caller's host, which the gateway's
// is not; the server moves trees through Archives.
func (c *cluster) CopyIn(context.Context, string, string, string) error {
	return unsupported("copying from the gateway's own files", "send a tar stream (PUT /v1/sandboxes/{id}/files)")
}

func (c *cluster) CopyOut(context.Context, string, string, string) error {
	return unsupported("copying to the gateway's own files", "ask for a tar stream (GET /v1/sandboxes/{id}/files?format=tar)")
}

func (c *cluster) ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.ReadFile(ctx, id, path)
}

func (c *cluster) WriteFile(ctx context.Context, ref, path string, r io.Reader) error {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return err
	}
	return cl.WriteFile(ctx, id, path, r)
}

func (c *cluster) PutArchive(ctx context.Context, ref, dst string, r io.Reader) error {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return err
	}
	return cl.PutArchive(ctx, id, dst, r)
}

func (c *cluster) GetArchive(ctx context.Context, ref, src string, w io.Writer) error {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return err
	}
	return cl.GetArchive(ctx, id, src, w)
}

func (c *cluster) Logs(ctx context.Context, ref string, o sandbox.LogOptions) error {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return err
	}
	return cl.Logs(ctx, id, o)
}

// Checkpoint makes a SandboxSnapshot, which outlives its sandbox; the
// sandbox keeps running.
func (c *cluster) Checkpoint(ctx context.Context, ref string, o sandbox.CheckpointOptions) (*sandbox.Snapshot, error) {
	if o.Stop {
		return nil, errdefs.New(errdefs.ErrInvalid, "stop: not served by the cluster gateway; delete the sandbox after the checkpoint")
	}
	src, _, err := c.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	s, err := c.g.checkpoint(ctx, src, o.Name)
	if err != nil {
		return nil, nodeError(err)
	}
	return c.snapshotRecord(ctx, s)
}

// Restore makes a Sandbox restoring the snapshot, placed beside it or on
// a node that copies it.
func (c *cluster) Restore(ctx context.Context, ref string, o sandbox.RestoreOptions) (*sandbox.Sandbox, error) {
	if o.TTL < 0 {
		return nil, errdefs.New(errdefs.ErrInvalid, "ttl: must not be negative")
	}
	s, err := c.snapshot(ctx, ref)
	if err != nil {
		return nil, err
	}
	return c.createNamed(ctx, s.Namespace, o.Name, restoreSpec(s, o.Labels, o.TTL))
}

// Fork makes all copies or none (those made are removed when one fails),
// each an object of its own.
func (c *cluster) Fork(ctx context.Context, ref string, o sandbox.ForkOptions) ([]*sandbox.Sandbox, error) {
	if o.N < 1 || o.N > sandbox.MaxFork {
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("n: must be between 1 and %d", sandbox.MaxFork))
	}
	src, _, err := c.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	prefix := "sbx-"
	if o.NamePrefix != "" {
		prefix = o.NamePrefix + "-"
	}
	copies, errs, err := c.g.fork(ctx, src, o.N, prefix, c.g.cfg.DefaultTTL, nil)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		for _, cp := range copies {
			if cp != nil {
				c.g.cfg.Kube.Delete(context.WithoutCancel(ctx), cp)
			}
		}
		return nil, nodeError(err)
	}
	out := make([]*sandbox.Sandbox, o.N)
	for i, cp := range copies {
		if out[i], err = c.get(ctx, cp, cp.Status.Instances[0].ID); err != nil {
			return nil, fmt.Errorf("copy %s on its node: %w", cp.Name, err)
		}
	}
	return out, nil
}

func (c *cluster) Pause(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.setPaused(ctx, ref, true)
}

func (c *cluster) Resume(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.setPaused(ctx, ref, false)
}

// setPaused pauses or resumes through the object.
func (c *cluster) setPaused(ctx context.Context, ref string, paused bool) (*sandbox.Sandbox, error) {
	sb, id, err := c.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb, err = c.g.setPaused(ctx, sb, paused); err != nil {
		return nil, nodeError(err)
	}
	return c.get(ctx, sb, id)
}

func (c *cluster) NetStatus(ctx context.Context, ref string) (*sandbox.NetworkState, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.NetStatus(ctx, id)
}

func (c *cluster) NetEvents(ctx context.Context, ref string) ([]sandbox.NetworkEvent, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.NetEvents(ctx, id)
}

func (c *cluster) NetUpdate(ctx context.Context, ref string, p sandbox.Network) (*sandbox.Sandbox, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.NetUpdate(ctx, id, p)
}

// Pools are the namespace's SandboxWarmPools, made and sized as
// Kubernetes objects; a create claims from one by name.
const poolsWhy = "warm pools are SandboxWarmPool objects (docs/kube.md); create with pool set claims from one"

func (c *cluster) RemovePool(context.Context, string) error {
	return unsupported("removing a pool", poolsWhy)
}

func (c *cluster) CreatePool(context.Context, sandbox.PoolOptions) (*sandbox.Pool, error) {
	return nil, unsupported("creating a pool", poolsWhy)
}

func (c *cluster) FillPool(context.Context, string) (int, error) {
	return 0, unsupported("filling a pool", poolsWhy)
}

func (c *cluster) Pool(ctx context.Context, name string) (*sandbox.Pool, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	p, err := c.g.pool(ctx, n, name)
	if err == nil && p == nil {
		err = fmt.Errorf("warm pool %q: %w", name, errNotFound)
	}
	if err != nil {
		return nil, nodeError(err)
	}
	return warmPool(p), nil
}

func (c *cluster) Pools(ctx context.Context) ([]*sandbox.Pool, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	var list v1alpha1.SandboxWarmPoolList
	if err := c.g.cfg.Kube.List(ctx, &list, kclient.InNamespace(n)); err != nil {
		return nil, fmt.Errorf("list warm pools: %w", err)
	}
	out := []*sandbox.Pool{}
	for i := range list.Items {
		out = append(out, warmPool(&list.Items[i]))
	}
	slices.SortFunc(out, func(a, b *sandbox.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// warmPool is p as a single serve's pool reads: its replicas are started
// sandboxes waiting, or for a hot pool paused ones.
func warmPool(p *v1alpha1.SandboxWarmPool) *sandbox.Pool {
	sp := &sandbox.Pool{Name: p.Name, CreatedAt: p.CreationTimestamp.Time}
	size, ready := int(p.Spec.Replicas), int(p.Status.ReadyReplicas)
	if p.Spec.Hot {
		sp.Hot, sp.HotReady = size, ready
	} else {
		sp.Size, sp.Ready = size, ready
	}
	return sp
}

// FS would need the node's file system API, which its smolvm serve
// offers only through E2B's envd.
func (c *cluster) FS(context.Context, string) (sandbox.FS, error) {
	return nil, unsupported("a sandbox's file system", "files are read and written whole (/v1/sandboxes/{id}/files)")
}

// DialPort reaches the port through the tunnel of the node's serve.
func (c *cluster) DialPort(ctx context.Context, ref string, port int) (net.Conn, error) {
	_, id, cl, err := c.on(ctx, ref)
	if err != nil {
		return nil, err
	}
	return cl.DialPort(ctx, id, port)
}

func (c *cluster) DialPublished(context.Context, string, string) (net.Conn, error) {
	return nil, unsupported("published ports", "they are the nodes' own")
}

// Subscribe ends at once: events are each node's, not the cluster's.
func (c *cluster) Subscribe(context.Context) (<-chan sandbox.Event, func()) {
	ch := make(chan sandbox.Event)
	close(ch)
	return ch, func() {}
}

// Publish drops e: the gateway runs no agent runs whose progress it would
// be.
func (c *cluster) Publish(context.Context, sandbox.Event) {}

func (c *cluster) Account(context.Context) error {
	return unsupported("usage accounting", "each node accounts the sandboxes it runs")
}

func (c *cluster) Usage(context.Context, time.Time, string, string) ([]sandbox.Usage, error) {
	return nil, unsupported("usage", "each node accounts the sandboxes it runs")
}

func (c *cluster) Reap(context.Context, time.Duration) ([]string, error) {
	return nil, unsupported("reaping", "each node removes its expired sandboxes")
}

// SnapshotInUse reports whether a Sandbox of ctx's namespace restores
// from the snapshot with ID id.
func (c *cluster) SnapshotInUse(ctx context.Context, id string) (bool, error) {
	s, err := c.snapshot(ctx, id)
	if err != nil {
		return false, err
	}
	_, err = c.g.snapshotUser(ctx, s)
	switch {
	case errors.Is(err, errNotFound):
		return false, nil
	case err != nil:
		return false, nodeError(err)
	}
	return true, nil
}

func (c *cluster) Tenants() sandbox.Tenants { return keys{c.g} }

// snapshot finds the SandboxSnapshot ref names in ctx's namespace.
func (c *cluster) snapshot(ctx context.Context, ref string) (*v1alpha1.SandboxSnapshot, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	s, err := c.g.snapshot(ctx, n, ref)
	if errors.Is(err, errNotFound) {
		// The same answer for another namespace's snapshot.
		return nil, fmt.Errorf("snapshot %q: %w", ref, sandbox.ErrSnapshotNotFound)
	}
	if err != nil {
		return nil, nodeError(err)
	}
	return s, nil
}

// snapshotRecord is a holder node's record of s, as the cluster names it:
// the object's name, and its Sandbox's.
func (c *cluster) snapshotRecord(ctx context.Context, s *v1alpha1.SandboxSnapshot) (*sandbox.Snapshot, error) {
	var out sandbox.Snapshot
	err := errors.New("no live node holds it")
	for _, node := range s.Status.Nodes {
		var base *url.URL
		if base, err = c.g.nodeURL(ctx, node); err != nil {
			continue
		}
		var code int
		if code, err = c.g.fwd.call(ctx, "GET", base, "/v1/snapshots/"+url.PathEscape(s.Status.ID), &out); err == nil && code != http.StatusOK {
			err = fmt.Errorf("node %s answered %d", node, code)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, fmt.Sprintf("snapshot %s: %v", s.Name, err))
	}
	out.Name, out.Names, out.Lineage.SandboxName = s.Name, []string{s.Name}, s.Spec.SandboxRef.Name
	return &out, nil
}

// snapshots is the store of the namespace's SandboxSnapshots that
// httpapi serves /v1/snapshots from.
type snapshots struct{ c *cluster }

func (s snapshots) Get(ctx context.Context, ref string) (*sandbox.Snapshot, error) {
	snap, err := s.c.snapshot(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.c.snapshotRecord(ctx, snap)
}

// List answers from the objects: a record per snapshot without its
// files, which Get gives.
func (s snapshots) List(ctx context.Context) ([]sandbox.Snapshot, error) {
	n, err := ns(ctx)
	if err != nil {
		return nil, err
	}
	all, err := s.c.g.snapshots(ctx, n)
	if err != nil {
		return nil, nodeError(err)
	}
	out := []sandbox.Snapshot{}
	for _, s := range all {
		out = append(out, sandbox.Snapshot{
			ID: s.Status.ID, Name: s.Name, Names: []string{s.Name}, Created: s.CreationTimestamp.Time, Size: s.Status.SizeBytes,
			Lineage: sandbox.Lineage{Sandbox: s.Status.SandboxID, SandboxName: s.Spec.SandboxRef.Name},
		})
	}
	return out, nil
}

// Remove deletes the SandboxSnapshot once no Sandbox restores from it
// (the cluster's own check stands in for inUse), and waits until its
// node removed it.
func (s snapshots) Remove(ctx context.Context, ref string, _ func(string) (bool, error)) error {
	snap, err := s.c.snapshot(ctx, ref)
	if err != nil {
		return err
	}
	if err := s.c.g.deleteSnapshot(ctx, snap); err != nil {
		return nodeError(err)
	}
	return nil
}

const snapshotsWhy = "a snapshot moves between nodes by itself when a restore needs it"

func (s snapshots) Export(context.Context, *sandbox.Snapshot, io.Writer) error {
	return unsupported("snapshot export", snapshotsWhy)
}

func (s snapshots) Import(context.Context, io.Reader, string) (*sandbox.Snapshot, bool, error) {
	return nil, false, unsupported("snapshot import", snapshotsWhy)
}

// images answers that images are the nodes' own: each pulls what its
// sandboxes need (SandboxImage objects prepull).
type images struct{}

const imagesWhy = "images are node state; a node pulls what its sandboxes need (docs/kube.md)"

func (images) Get(context.Context, string) (*sandbox.Image, error) {
	return nil, unsupported("an image", imagesWhy)
}

func (images) List(context.Context) ([]sandbox.Image, error) {
	return nil, unsupported("the images", imagesWhy)
}

func (images) Pull(context.Context, string, sandbox.PullOptions) (*sandbox.Image, error) {
	return nil, unsupported("pulling an image", imagesWhy)
}

// keys are the gateway's API keys as the server's tenants: each resolves
// to its namespace. They are read from a file at start (Config.Keys), so
// none is made or changed through the API.
type keys struct{ g *Gateway }

const keysWhy = "the gateway's keys are its --keys file, one namespace each"

func (k keys) Add(context.Context, string, sandbox.Quota) (*sandbox.Tenant, error) {
	return nil, unsupported("adding a tenant", keysWhy)
}

func (k keys) Remove(context.Context, string) error {
	return unsupported("removing a tenant", keysWhy)
}

// Get knows the namespaces the keys act in.
func (k keys) Get(_ context.Context, name string) (*sandbox.Tenant, error) {
	if !slices.Contains(slices.Collect(maps.Values(k.g.cfg.Keys)), name) {
		return nil, errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("tenant %q: no key acts in that namespace", name))
	}
	return &sandbox.Tenant{Name: name}, nil
}

func (k keys) List(context.Context) ([]*sandbox.Tenant, error) {
	return nil, unsupported("listing tenants", keysWhy)
}

func (k keys) SetQuota(context.Context, string, sandbox.Quota) (*sandbox.Tenant, error) {
	return nil, unsupported("tenant quotas", "a namespace's cap is its "+AnnotationMaxSandboxes+" annotation")
}

func (k keys) AddKey(context.Context, string) (sandbox.TenantKey, string, error) {
	return sandbox.TenantKey{}, "", unsupported("adding a key", keysWhy)
}

func (k keys) RemoveKey(context.Context, string, string) error {
	return unsupported("removing a key", keysWhy)
}

// Resolve is the namespace of the key secret.
func (k keys) Resolve(_ context.Context, secret string) (string, bool) {
	return k.g.resolve(secret)
}

// volumesWhy: a volume is an ext4 image on one node's disk.
const volumesWhy = "volumes are a node's (docs/volumes.md)"

func (*cluster) CreateVolume(context.Context, sandbox.VolumeOptions) (*sandbox.Volume, error) {
	return nil, unsupported("creating a volume", volumesWhy)
}

func (*cluster) GetVolume(context.Context, string) (*sandbox.Volume, error) {
	return nil, unsupported("a volume", volumesWhy)
}

func (*cluster) ListVolumes(context.Context) ([]*sandbox.Volume, error) {
	return nil, unsupported("the volumes", volumesWhy)
}

func (*cluster) RemoveVolume(context.Context, string, bool) error {
	return unsupported("removing a volume", volumesWhy)
}

func (*cluster) VolumeRoot(context.Context, string) (*os.Root, error) {
	return nil, unsupported("a volume's files", volumesWhy)
}
