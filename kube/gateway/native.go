package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

func (g *Gateway) nativeRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", g.nativeCreate)
	mux.HandleFunc("GET /v1/sandboxes", g.nativeList)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", g.nativeRemove)
	mux.HandleFunc("POST /v1/sandboxes/{id}/pause", g.nativePause(true))
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", g.nativePause(false))
	// What changes a sandbox's life goes through its object.
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", g.nativeFork)
	mux.HandleFunc("POST /v1/sandboxes/{id}/checkpoint", g.nativeCheckpoint)
	for _, op := range []string{"start", "stop"} {
		mux.HandleFunc("POST /v1/sandboxes/{id}/"+op, func(w http.ResponseWriter, r *http.Request) {
			writeNative(w, http.StatusNotImplemented, api.CodeUnsupported, op+" is not served by the cluster gateway: a Sandbox runs until deleted (pause and resume are served)")
		})
	}
	mux.HandleFunc("GET /v1/snapshots", g.nativeSnapshots)
	mux.HandleFunc("GET /v1/snapshots/{snapshot}", g.nativeGetSnapshot)
	mux.HandleFunc("DELETE /v1/snapshots/{snapshot}", g.nativeDeleteSnapshot)
	mux.HandleFunc("POST /v1/snapshots/{snapshot}/restore", g.nativeRestore)
	// The rest about one sandbox (exec, files, logs, stats, ports,
	// timeout, network) its node answers.
	mux.HandleFunc("/v1/sandboxes/{id}", g.nativeForward)
	mux.HandleFunc("/v1/sandboxes/{id}/{rest...}", g.nativeForward)
	unserved := func(w http.ResponseWriter, r *http.Request) {
		writeNative(w, http.StatusNotImplemented, api.CodeUnsupported, fmt.Sprintf("%s %s is not served by the cluster gateway: it serves sandboxes, snapshots and E2B's API; pools and images are Kubernetes objects and node state (docs/kube.md)", r.Method, r.URL.Path))
	}
	// Without a method, these catch what ServeMux would answer with a
	// bare 405 (another method of a served path), such as a node's
	// snapshot import.
	mux.HandleFunc("/v1/snapshots", unserved)
	mux.HandleFunc("/v1/snapshots/{snapshot}", unserved)
	mux.HandleFunc("/", unserved)
	return mux
}

// nativeSpec is the Sandbox smolvm's create body asks for; what a node
// cannot be told through a Sandbox is refused by name.
func (g *Gateway) nativeSpec(req *api.CreateRequest) (v1alpha1.SandboxSpec, error) {
	var spec v1alpha1.SandboxSpec
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"hostname", req.Hostname != ""}, {"idle_timeout", req.IdleTimeout != 0},
		{"on_expiry", req.OnExpiry != "" && req.OnExpiry != sandbox.ExpiryStop}, {"policy", req.TrustRepo != ""},
		{"start", req.Start != nil && !*req.Start}, {"volumes", len(req.Volumes) > 0},
	} {
		if f.set {
			return spec, fmt.Errorf("%s: not served by the cluster gateway", f.name)
		}
	}
	if req.Image == "" {
		return spec, errors.New("image: required")
	}
	spec.Image, spec.Command, spec.WorkingDir, spec.User, spec.Backend = req.Image, req.Cmd, req.WorkDir, req.User, req.Backend
	spec.Labels = req.Labels
	for _, e := range req.Env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return spec, fmt.Errorf("env: %q is not NAME=VALUE", e)
		}
		spec.Env = append(spec.Env, v1alpha1.EnvVar{Name: k, Value: v})
	}
	if req.CPUs < 0 || req.Memory < 0 || req.Disk < 0 || req.Pids < 0 {
		return spec, errors.New("cpus, memory, disk, pids: must not be negative")
	}
	if req.CPUs > 0 || req.Memory > 0 || req.Disk > 0 || req.Pids > 0 {
		res := &v1alpha1.Resources{}
		if req.CPUs > 0 {
			res.CPU = resource.NewMilliQuantity(int64(req.CPUs*1000), resource.DecimalSI)
		}
		if req.Memory > 0 {
			res.Memory = resource.NewQuantity(int64(req.Memory), resource.BinarySI)
		}
		if req.Disk > 0 {
			res.Disk = resource.NewQuantity(int64(req.Disk), resource.BinarySI)
		}
		if req.Pids > 0 {
			res.Pids = ptr.To(req.Pids)
		}
		spec.Resources = res
	}
	spec.Network = networkPolicy(req.Network)
	ttl := g.cfg.DefaultTTL
	if req.Timeout != nil {
		if ttl = time.Duration(*req.Timeout); ttl < 0 {
			return spec, errors.New("timeout: must not be negative")
		}
	}
	spec.TTLSeconds = ptr.To(int64(ttl / time.Second))
	return spec, nil
}

func (g *Gateway) nativeCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateRequest
	if err := decode(r, &req); err != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	if req.Pool != "" {
		g.nativeClaim(w, r, &req)
		return
	}
	spec, err := g.nativeSpec(&req)
	if err != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	prefix := "sbx-"
	if req.Name != "" {
		// A name is the object's own; Kubernetes refuses one in use.
		prefix = ""
	}
	sb, err := g.create(r.Context(), namespace(r), req.Name, prefix, spec, nil)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	g.nativeGet(w, r, sb, sb.Status.Instances[0].ID, http.StatusCreated)
}

// nativeClaim answers a create from a warm pool: one of its ready
// sandboxes, given the request's time to live, or else a fresh one of its
// template.
func (g *Gateway) nativeClaim(w http.ResponseWriter, r *http.Request, req *api.CreateRequest) {
	if req.Name != "" || req.Image != "" || len(req.Cmd) > 0 || len(req.Env) > 0 || len(req.Labels) > 0 || req.Network != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, "pool: a pool's sandboxes are made before the claim; name, image, cmd, env, labels and network cannot be given with it")
		return
	}
	ctx, ns := r.Context(), namespace(r)
	pool, err := g.pool(ctx, ns, req.Pool)
	if err == nil && pool == nil {
		err = fmt.Errorf("warm pool %q: %w", req.Pool, errNotFound)
	}
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	ttl := g.cfg.DefaultTTL
	if req.Timeout != nil {
		ttl = time.Duration(*req.Timeout)
	}
	sb, err := g.claim(ctx, pool, nil)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	if sb == nil {
		spec := pool.Spec.Member()
		spec.TTLSeconds = ptr.To(int64(ttl / time.Second))
		if sb, err = g.create(ctx, ns, "", pool.Name+"-", spec, nil); err != nil {
			writeNativeErr(w, err)
			return
		}
		g.nativeGet(w, r, sb, sb.Status.Instances[0].ID, http.StatusCreated)
		return
	}
	id := sb.Status.Instances[0].ID
	base, err := g.node(ctx, sb)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	body, _ := json.Marshal(api.TimeoutRequest{Timeout: ptr.To(api.Duration(ttl))})
	var out json.RawMessage
	if code, err := g.fwd.call(ctx, "POST", base, "/v1/sandboxes/"+url.PathEscape(id)+"/timeout", body, &out); err != nil || code >= 300 {
		writeNative(w, http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("set the claimed sandbox's time to live on its node: %d %v", code, err))
		return
	}
	if pool.Spec.Hot {
		// Resumed here rather than left to the node's reconcile of the
		// claim, so that the answer is a running sandbox; a 409 is that
		// reconcile having done it first.
		if code, err := g.fwd.call(ctx, "POST", base, "/v1/sandboxes/"+url.PathEscape(id)+"/resume", nil, &out); err != nil || (code >= 300 && code != http.StatusConflict) {
			writeNative(w, http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("resume the claimed sandbox on its node: %d %v %s", code, err, out))
			return
		}
	}
	g.nativeGet(w, r, sb, id, http.StatusCreated)
}

// nativeGet answers with the node's view of sandbox id.
func (g *Gateway) nativeGet(w http.ResponseWriter, r *http.Request, sb *v1alpha1.Sandbox, id string, status int) {
	base, err := g.node(r.Context(), sb)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	var out json.RawMessage
	code, err := g.fwd.call(r.Context(), "GET", base, "/v1/sandboxes/"+url.PathEscape(id), nil, &out)
	if err != nil {
		writeNative(w, http.StatusBadGateway, api.CodeUnavailable, err.Error())
		return
	}
	if code == http.StatusOK {
		code = status
	}
	writeJSON(w, code, out)
}

func (g *Gateway) nativeList(w http.ResponseWriter, r *http.Request) {
	out, err := g.gather(r.Context(), namespace(r), "/v1/sandboxes", "id", nil)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// nativeFork answers the native fork: all copies or none (those made
// are removed when one fails), each an object of its own.
func (g *Gateway) nativeFork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := decode(r, &req); err != nil {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > sandbox.MaxFork {
		writeNative(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("n: must be between 1 and %d", sandbox.MaxFork))
		return
	}
	src, _, ok := g.nativeLookup(w, r)
	if !ok {
		return
	}
	prefix := "sbx-"
	if req.NamePrefix != "" {
		prefix = req.NamePrefix + "-"
	}
	copies, errs, err := g.fork(r.Context(), src, n, prefix, g.cfg.DefaultTTL, nil)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		for _, c := range copies {
			if c != nil {
				g.cfg.Kube.Delete(context.WithoutCancel(r.Context()), c)
			}
		}
		writeNativeErr(w, err)
		return
	}
	out := make([]json.RawMessage, n)
	for i, c := range copies {
		base, err := g.node(r.Context(), c)
		if err != nil {
			writeNativeErr(w, err)
			return
		}
		if code, err := g.fwd.call(r.Context(), "GET", base, "/v1/sandboxes/"+url.PathEscape(c.Status.Instances[0].ID), nil, &out[i]); err != nil || code != http.StatusOK {
			writeNative(w, http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("copy %s on its node: %d %v", c.Name, code, err))
			return
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

func (g *Gateway) nativeRemove(w http.ResponseWriter, r *http.Request) {
	sb, _, ok := g.nativeLookup(w, r)
	if !ok {
		return
	}
	if err := g.remove(r.Context(), sb); err != nil {
		writeNativeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) nativePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, id, ok := g.nativeLookup(w, r)
		if !ok {
			return
		}
		sb, err := g.setPaused(r.Context(), sb, paused)
		if err != nil {
			writeNativeErr(w, err)
			return
		}
		g.nativeGet(w, r, sb, id, http.StatusOK)
	}
}

func (g *Gateway) nativeForward(w http.ResponseWriter, r *http.Request) {
	sb, id, ok := g.nativeLookup(w, r)
	if !ok {
		return
	}
	base, err := g.node(r.Context(), sb)
	if err != nil {
		writeNativeErr(w, err)
		return
	}
	g.fwd.forward(w, r, base, withID(r.URL.Path, r.PathValue("id"), id), true)
}

func (g *Gateway) nativeLookup(w http.ResponseWriter, r *http.Request) (*v1alpha1.Sandbox, string, bool) {
	ref := r.PathValue("id")
	sb, err := g.lookup(r.Context(), namespace(r), ref)
	if err != nil {
		writeNativeErr(w, err)
		return nil, "", false
	}
	return sb, instance(sb, ref), true
}

// writeNativeErr answers err in the native API's shape.
func writeNativeErr(w http.ResponseWriter, err error) {
	if errors.Is(err, errQuota) {
		// As a single smolvm serve answers a tenant over its quota.
		writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeConflict, Class: errdefs.Name(errdefs.ErrQuota), Message: err.Error()})
		return
	}
	status := statusOf(err)
	code := map[int]string{
		http.StatusBadRequest: api.CodeInvalid, http.StatusNotFound: api.CodeNotFound, http.StatusConflict: api.CodeConflict,
		http.StatusForbidden: api.CodeDenied, http.StatusUnprocessableEntity: api.CodeCannotStart, http.StatusServiceUnavailable: api.CodeUnavailable,
	}[status]
	if code == "" {
		code = api.CodeInternal
	}
	writeNative(w, status, code, err.Error())
}
