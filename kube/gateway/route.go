package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
)

// errNotFound is a sandbox the caller's namespace does not hold.
var errNotFound = errors.New("not found")

// lookup finds the Sandbox that ref names in ns: one of its smolvm
// sandboxes' IDs (what E2B and the native API hand out), or the object's
// own name. The cache may lag the API server (a caller that read an ID
// from kubectl): a miss there is read again from the API server.
func (g *Gateway) lookup(ctx context.Context, ns, ref string) (*v1alpha1.Sandbox, error) {
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(ns), kclient.MatchingFields{indexInstance: ref}); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", ref, err)
	}
	if len(list.Items) > 0 {
		return &list.Items[0], nil
	}
	var sb v1alpha1.Sandbox
	err := g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: ref}, &sb)
	if err == nil && len(sb.Status.Instances) > 0 {
		return &sb, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("sandbox %s: %w", ref, err)
	}
	if g.cfg.Direct != nil {
		if err := g.cfg.Direct.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", ref, err)
		}
		for i := range list.Items {
			if sb := &list.Items[i]; len(sb.Status.Instances) > 0 && (sb.Name == ref || instance(sb, ref) == ref) {
				return sb, nil
			}
		}
	}
	return nil, fmt.Errorf("sandbox %q: %w", ref, errNotFound)
}

// instance is the ID of the smolvm sandbox ref names in sb: ref itself,
// or the only one of an object named ref.
func instance(sb *v1alpha1.Sandbox, ref string) string {
	for _, in := range sb.Status.Instances {
		if in.ID == ref {
			return ref
		}
	}
	return sb.Status.Instances[0].ID
}

// errNodeGone is a sandbox whose node stopped renewing its Lease.
var errNodeGone = errors.New("node gone")

// node returns the URL of the smolvm serve on the node holding sb.
func (g *Gateway) node(ctx context.Context, sb *v1alpha1.Sandbox) (*url.URL, error) {
	name := sb.Status.NodeName
	if name == "" {
		name = sb.Spec.NodeName
	}
	u, err := g.nodeURL(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.Name, err)
	}
	return u, nil
}

// nodeURL returns the URL of the smolvm serve on node name, from its
// Lease, if the node is live.
func (g *Gateway) nodeURL(ctx context.Context, name string) (*url.URL, error) {
	var l coordinationv1.Lease
	if err := g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: g.cfg.LeaseNamespace, Name: v1alpha1.LeasePrefix + name}, &l); err != nil {
		return nil, fmt.Errorf("node %q: %w", name, err)
	}
	n, ok := v1alpha1.NodeFromLease(&l)
	if !ok || n.Endpoint == "" {
		return nil, fmt.Errorf("node %q: its Lease names no endpoint", name)
	}
	if time.Now().After(n.Expires) {
		return nil, fmt.Errorf("node %q: %w (its Lease lapsed at %s)", name, errNodeGone, n.Expires.Format(time.RFC3339))
	}
	u, err := url.Parse(n.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("node %q: endpoint: %w", name, err)
	}
	return u, nil
}

// forwarder sends requests on to nodes' smolvm serve, streaming both
// ways (envd's Connect streams, WebSocket upgrades to ports).
type forwarder struct {
	token  string
	proxy  *httputil.ReverseProxy
	client *http.Client
}

type targetKey struct{}

// target is where one request goes: a node, the path there, and whether
// it acts with the node's token (control plane) or its own (envd).
type target struct {
	base  *url.URL
	path  string
	token bool
}

func newForwarder(token string) *forwarder {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many sandboxes' traffic goes to few nodes.
	tr.MaxIdleConnsPerHost = 256
	f := &forwarder{token: token, client: &http.Client{Transport: tr}}
	f.proxy = &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme, pr.Out.URL.Host = t.base.Scheme, t.base.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = t.base.Path+t.path, ""
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-API-KEY")
			if t.token {
				pr.Out.Header.Set("Authorization", "Bearer "+f.token)
			}
		},
		// Streams flush as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeE2B(w, http.StatusBadGateway, fmt.Sprintf("the sandbox's node did not answer: %v", err))
		},
	}
	return f
}

// forward sends r to path on the node at base.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, base *url.URL, path string, token bool) {
	// A stream's answer starts before its request body is all sent. An
	// HTTP/1.1 handler may not read the body after the first flush
	// otherwise: the transport's copy of it then fails, and the node
	// connection is closed mid-stream (the SDK's "terminated").
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		writeE2B(w, http.StatusInternalServerError, err.Error())
		return
	}
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target{base: base, path: path, token: token})))
}

// forwardEnvd routes an envd or port request by its sandbox ID. It acts
// with the caller's credentials (the sandbox's access tokens), so it
// needs no API key, and looks across namespaces: the ID is the secret's
// partner, not the secret. An API key of the sandbox's namespace opens
// its ports too, as on a single smolvm serve: the request then goes on
// with the nodes' token.
func (g *Gateway) forwardEnvd(w http.ResponseWriter, r *http.Request, id string) {
	sb, ok := g.byID(r.Context(), id)
	if !ok {
		envdGone(w, r, fmt.Sprintf("sandbox %q not found: it is not running anymore", id))
		return
	}
	base, err := g.node(r.Context(), sb)
	if err != nil {
		envdGone(w, r, err.Error())
		return
	}
	ns, keyed := g.tenant(r)
	g.fwd.forward(w, r, base, e2bPrefix+r.URL.Path, keyed && ns == sb.Namespace)
}

// envdGone answers a request for a sandbox that cannot be reached. For
// envd, that is as E2B's own proxy does: 502, which the SDK reads as "not
// running" (Connect's unavailable; isRunning false), in the shape of the
// request's protocol. A port of the sandbox's own answers 404, as the
// node would for a sandbox it no longer has (the code interpreter's
// NotFoundError).
func envdGone(w http.ResponseWriter, r *http.Request, msg string) {
	if p := r.Header.Get(headerSandboxPort); p != "" && p != e2bapi.EnvdPort {
		writeE2B(w, http.StatusNotFound, msg)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.") {
		writeJSON(w, http.StatusBadGateway, map[string]string{"code": "unavailable", "message": msg})
		return
	}
	writeE2B(w, http.StatusBadGateway, msg)
}

// cacheLag bounds how long an envd request for an ID the cache does not
// know waits for it: envd requests carry no API key, so a miss is not
// worth a read of every namespace from the API server.
const cacheLag = time.Second

// byID finds the Sandbox holding smolvm sandbox id, in any namespace.
func (g *Gateway) byID(ctx context.Context, id string) (*v1alpha1.Sandbox, bool) {
	deadline := time.Now().Add(cacheLag)
	for {
		var list v1alpha1.SandboxList
		if err := g.cfg.Kube.List(ctx, &list, kclient.MatchingFields{indexInstance: id}); err == nil && len(list.Items) > 0 {
			return &list.Items[0], true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, false
		}
		time.Sleep(10 * poll)
	}
}
