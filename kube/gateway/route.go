package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
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

// forwarder sends envd requests on to nodes' smolvm serve, streaming
// both ways, and calls their API.
type forwarder struct {
	token  string
	proxy  *httputil.ReverseProxy
	client *http.Client
}

// target is where one request goes: a node, and the path there.
type target struct {
	base *url.URL
	path string
}

type targetKey struct{}

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
			// The gateway checked the caller's credentials; the node
			// takes its own key, which opens envd as it opens ports. A
			// Basic authorization names envd's user, and stays.
			pr.Out.Header.Del("X-Access-Token")
			if a := pr.Out.Header.Get("Authorization"); !strings.HasPrefix(strings.ToLower(a), "basic ") {
				pr.Out.Header.Del("Authorization")
			}
			pr.Out.Header.Set("X-API-KEY", f.token)
		},
		// Streams flush as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			envdGone(w, r, fmt.Sprintf("the sandbox's node did not answer: %v", err))
		},
	}
	return f
}

// forwardEnvd sends an envd request, once server/e2b found that its
// credentials open sb, to the envd of sb's node.
func (g *Gateway) forwardEnvd(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	obj, err := g.byID(r.Context(), sb.ID)
	if err == nil {
		var base *url.URL
		if base, err = g.node(r.Context(), obj); err == nil {
			g.fwd.forward(w, r, base, sb.ID)
			return
		}
	}
	envdGone(w, r, err.Error())
}

// forward sends r, an envd request for sandbox id, to the node at base.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, base *url.URL, id string) {
	// A stream's answer starts before its request body is all sent. An
	// HTTP/1.1 handler may not read the body after the first flush
	// otherwise: the transport's copy of it then fails, and the node
	// connection is closed mid-stream (the SDK's "terminated").
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		envdGone(w, r, err.Error())
		return
	}
	// A signed file URL may name no sandbox; the node needs the ID.
	r.Header.Set(headerSandboxID, id)
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target{base: base, path: e2bPrefix + r.URL.Path})))
}

// envdGone answers an envd request whose node cannot be reached as E2B's
// own proxy does: 502, which the SDK reads as "not running" (Connect's
// unavailable; isRunning false), in the shape of the request's protocol.
func envdGone(w http.ResponseWriter, r *http.Request, msg string) {
	if strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.") {
		httpguard.WriteJSON(w, http.StatusBadGateway, map[string]string{"code": "unavailable", "message": msg})
		return
	}
	httpguard.WriteJSON(w, http.StatusBadGateway, e2bapi.Error{Code: http.StatusBadGateway, Message: msg})
}

// call sends a request with the node's token to path on the node at
// base and decodes its JSON answer into out.
func (f *forwarder) call(ctx context.Context, method string, base *url.URL, path string, out any) (int, error) {
	u := *base
	u.Path = base.Path + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", base.Host, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("node %s: %s %s: %w", base.Host, method, path, err)
	}
	return resp.StatusCode, nil
}

// cacheLag bounds how long a request that names a sandbox by ID alone
// (envd and ports, by token) waits for the cache to know it: envd
// requests (no key) wait up to a second on the cache for a sandbox the
// gateway just made, as the SDK sends its first command as soon as
// create answers, perhaps to another replica. Without a key there is no
// namespace to read from the API server, and a miss is not worth a read
// of every namespace.
const cacheLag = time.Second

// byID finds the Sandbox holding smolvm sandbox id, in any namespace.
// Callers have checked a credential of that exact ID first (server/e2b's
// access), so the wait tells no one which IDs exist.
func (g *Gateway) byID(ctx context.Context, id string) (*v1alpha1.Sandbox, error) {
	deadline := time.Now().Add(cacheLag)
	for {
		var list v1alpha1.SandboxList
		if err := g.cfg.Kube.List(ctx, &list, kclient.MatchingFields{indexInstance: id}); err == nil && len(list.Items) > 0 {
			return &list.Items[0], nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("sandbox %q: %w", id, errNotFound)
		}
		time.Sleep(10 * poll)
	}
}
