// Package gateway serves E2B's API and smolvm's native API in front of a cluster: server/e2b and server/httpapi over one cluster runtime, which makes Sandbox objects, waits until a node runs them, and asks the node that holds a sandbox for the rest.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/server/e2b"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
)

// Config configures a Gateway.
type Config struct {
	// Kube reads Sandboxes and the nodes' Leases, from a cache prepared by
	// Setup, and writes Sandboxes.
	Kube kclient.Client
	// Direct reads from the API server itself, for what the cache may
	// not have seen yet (the manager's APIReader); nil reads only the
	// cache.
	Direct kclient.Reader
	// LeaseNamespace holds the nodes' Leases.
	LeaseNamespace string
	// Keys maps each API key to its tenant's namespace: a key sees and
	// makes Sandboxes there only.
	Keys map[string]string
	// NodeToken is the API token of the nodes' smolvm serve (one token,
	// shared through a Secret: docs/kube.md).
	NodeToken string
	// Domain is the one under which PORT-ID.Domain names a sandbox's port
	// (E2B's getHost); empty leaves the SDK's default.
	Domain string
	// DefaultTTL is the time to live of a sandbox created without a
	// timeout (default 15m).
	DefaultTTL time.Duration
	// Ready bounds the wait for a new sandbox to run (default 2m).
	Ready time.Duration
	Log   *slog.Logger
}

// Gateway is an http.Handler: E2B's API (control plane at / and /e2b,
// envd and ports by their headers or PORT-ID.Domain), served by
// server/e2b, and the native API at /v1, served by server/httpapi, both
// over one cluster runtime (cluster).
type Gateway struct {
	cfg    Config
	e2b    *e2b.Handler
	native *httpapi.Server
	fwd    *forwarder
	quotas quotas
	// noAdmin is the servers' admin token: the gateway has no admin, so
	// it is a secret no one holds, and every key acts as its namespace.
	noAdmin string
}

// New returns a Gateway over cfg.
func New(cfg Config) (*Gateway, error) {
	if cfg.Kube == nil || cfg.LeaseNamespace == "" || len(cfg.Keys) == 0 || cfg.NodeToken == "" {
		return nil, errors.New("gateway: Kube, LeaseNamespace, Keys and NodeToken are required")
	}
	if cfg.Ready <= 0 {
		cfg.Ready = 2 * time.Minute
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = 15 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, fwd: newForwarder(cfg.NodeToken), noAdmin: rand.Text()}
	c := newCluster(g)
	// Ports dial through the cluster, at the node's tunnel.
	proxy := ports.New(c.DialPort)
	g.native = httpapi.New(httpapi.Options{
		Manager: c, Images: images{}, Snapshots: snapshots{c}, Token: g.noAdmin,
		DefaultTTL: cfg.DefaultTTL, Logger: cfg.Log, Ports: proxy,
	})
	var err error
	g.e2b, err = e2b.New(context.Background(), e2b.Options{
		Manager: c, State: state{c}, Snapshots: snapshots{c}, Authorize: g.authorize,
		Ports: proxy, Domain: cfg.Domain, DefaultTTL: cfg.DefaultTTL,
		Where: "E2B's API is at / and " + e2bPrefix + ", smolvm's at /v1",
		// envd is forwarded to the sandbox's node, whose serve runs it:
		// the cluster runtime has no file system API (cluster.FS) for
		// server/e2b's own envd, and a node's envd is what the SDK's
		// streams (commands, pty, watchDir) were proven against.
		Envd: g.forwardEnvd,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return g, nil
}

// indexInstance indexes Sandboxes by the IDs of their smolvm sandboxes,
// which are the IDs clients use.
const indexInstance = "status.instances.id"

// Setup adds the index the gateway finds sandboxes by to c, and has c
// watch SandboxTemplates, SandboxWarmPools and SandboxSnapshots from the
// start, so that the first create or fork does not wait for those
// informers to sync.
func Setup(ctx context.Context, c cache.Cache) error {
	err := c.IndexField(ctx, &v1alpha1.Sandbox{}, indexInstance, func(o kclient.Object) []string {
		var ids []string
		for _, in := range o.(*v1alpha1.Sandbox).Status.Instances {
			ids = append(ids, in.ID)
		}
		return ids
	})
	if err != nil {
		return fmt.Errorf("gateway: index sandboxes: %w", err)
	}
	if err := c.IndexField(ctx, &v1alpha1.SandboxSnapshot{}, indexSnapshotID, indexSnapshots); err != nil {
		return fmt.Errorf("gateway: index snapshots: %w", err)
	}
	for _, o := range []kclient.Object{&v1alpha1.SandboxTemplate{}, &v1alpha1.SandboxWarmPool{}, &v1alpha1.SandboxSnapshot{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			return fmt.Errorf("gateway: watch %T: %w", o, err)
		}
	}
	return nil
}

// headerSandboxID names the sandbox of an envd or port request, and
// headerSandboxPort its port; the E2B SDK sends both.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
)

// e2bPrefix is where smolvm serve serves E2B's API besides its root; the
// gateway does the same, and forwards envd to nodes there.
const e2bPrefix = "/e2b"

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, port, ok := g.portHost(r.Host); ok {
		r.Header.Set(headerSandboxID, id)
		r.Header.Set(headerSandboxPort, port)
	}
	switch p := r.URL.Path; {
	case r.Header.Get(headerSandboxID) != "":
		// envd and ports: their paths are the sandbox's own.
		g.e2b.ServeHTTP(w, r)
	case p == "/v1" || strings.HasPrefix(p, "/v1/"):
		g.serveNative(w, r)
	case p == "/healthz":
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(p, e2bPrefix+"/"):
		http.StripPrefix(e2bPrefix, g.e2b).ServeHTTP(w, r)
	default:
		g.e2b.ServeHTTP(w, r)
	}
}

// serveNative serves the native API. The server authenticates the key
// itself, through the cluster's tenants (keys); the cluster acts in the
// key's namespace, which the request carries for it.
func (g *Gateway) serveNative(w http.ResponseWriter, r *http.Request) {
	if ns, ok := g.tenant(r); ok {
		r = r.WithContext(withNamespace(r.Context(), ns))
	}
	g.native.ServeHTTP(w, r)
}

// authorize is server/e2b's check of a key: the request then acts as the
// key's tenant (for the server) and in its namespace (for the cluster).
func (g *Gateway) authorize(r *http.Request) (*http.Request, bool) {
	ns, ok := g.tenant(r)
	if !ok {
		return r, false
	}
	if r, ok = httpapi.Authenticate(r, g.noAdmin, keys{g}); !ok {
		return r, false
	}
	return r.WithContext(withNamespace(r.Context(), ns)), true
}

// portHost splits PORT-ID.Domain, as E2B's getHost(port) names a port.
func (g *Gateway) portHost(host string) (id, port string, ok bool) {
	if g.cfg.Domain == "" {
		return "", "", false
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+g.cfg.Domain)
	if !ok {
		return "", "", false
	}
	port, id, ok = strings.Cut(label, "-")
	return id, port, ok && id != "" && !strings.Contains(id, ".")
}

// tenant returns the namespace of the request's API key: X-API-KEY (as
// E2B's SDK sends it) or Authorization: Bearer (as smolvm's client does).
// Keys that differ name no one (httpguard.APIKey).
func (g *Gateway) tenant(r *http.Request) (string, bool) {
	key, ok := httpguard.APIKey(r)
	if !ok {
		return "", false
	}
	return g.resolve(key)
}

// resolve returns the namespace of API key key.
func (g *Gateway) resolve(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	// Every key is compared, so the time taken says nothing of which
	// matched.
	ns, found := "", false
	for k, n := range g.cfg.Keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			ns, found = n, true
		}
	}
	return ns, found
}

type nsKey struct{}

func withNamespace(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, nsKey{}, ns)
}

func namespace(ctx context.Context) string {
	ns, _ := ctx.Value(nsKey{}).(string)
	return ns
}

// ManagerOptions are those of the controller-runtime manager whose cache
// a gateway reads: Leases in leaseNamespace only, and no leader election,
// as gateways are replicas that share nothing.
func ManagerOptions(scheme *k8sruntime.Scheme, leaseNamespace string) ctrl.Options {
	return ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[kclient.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{leaseNamespace: {}}},
		}},
	}
}

// ReadKeys reads API keys from path: one "NAMESPACE KEY" per line; blank
// lines and lines starting with # are skipped.
func ReadKeys(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	keys := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("keys: %s:%d: want NAMESPACE KEY", path, i+1)
		}
		if errs := validation.IsDNS1123Label(f[0]); len(errs) > 0 {
			return nil, fmt.Errorf("keys: %s:%d: namespace %q: %s", path, i+1, f[0], strings.Join(errs, "; "))
		}
		if len(f[1]) < 16 {
			return nil, fmt.Errorf("keys: %s:%d: key shorter than 16 characters", path, i+1)
		}
		if _, dup := keys[f[1]]; dup {
			return nil, fmt.Errorf("keys: %s:%d: key given twice", path, i+1)
		}
		keys[f[1]] = f[0]
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("keys: %s holds no key", path)
	}
	return keys, nil
}
