package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/sandbox"
)

func (g *Gateway) e2bRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", g.e2bCreate)
	mux.HandleFunc("POST /v2/sandboxes", g.e2bCreate)
	mux.HandleFunc("GET /sandboxes", g.e2bList)
	mux.HandleFunc("GET /v2/sandboxes", g.e2bList)
	mux.HandleFunc("DELETE /sandboxes/{id}", g.e2bKill)
	mux.HandleFunc("POST /sandboxes/{id}/connect", g.e2bConnect)
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", g.e2bConnect)
	mux.HandleFunc("POST /sandboxes/{id}/resume", g.e2bConnect)
	mux.HandleFunc("POST /sandboxes/{id}/pause", g.e2bPause)
	mux.HandleFunc("GET /sandboxes/{id}", g.e2bInfo)
	// The node answers these for the one sandbox it holds.
	for _, p := range []string{"POST /sandboxes/{id}/timeout", "GET /sandboxes/{id}/metrics", "PUT /sandboxes/{id}/network"} {
		mux.HandleFunc(p, g.e2bForward)
	}
	mux.HandleFunc("POST /sandboxes/{id}/fork", g.e2bFork)
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", g.e2bSnapshot)
	mux.HandleFunc("GET /snapshots", g.e2bSnapshots)
	mux.HandleFunc("DELETE /templates/{template}", g.e2bDeleteTemplate)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeE2B(w, http.StatusNotFound, fmt.Sprintf("no route %s %s; E2B's API is at / and %s, smolvm's at /v1", r.Method, r.URL.Path, e2bPrefix))
	})
	return mux
}

// e2bCreate makes a Sandbox from E2B's create body and answers once its
// node runs it, with the node's envd token: the SDK sends its first
// command straight away.
func (g *Gateway) e2bCreate(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.CreateRequest
	if err := decode(r, &req); err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	spec, err := g.e2bSpec(r.Context(), namespace(r.Context()), &req)
	if err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	pool, err := g.pool(r.Context(), namespace(r.Context()), req.TemplateID)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	template := map[string]string{AnnotationTemplate: req.TemplateID}
	if pool != nil {
		// A warm pool of that name: claim one of its sandboxes (the
		// connect resumes a hot one), unless the request asks for what
		// they were not made with (each is made before anyone asks);
		// else make one as the pool does.
		if len(req.EnvVars) == 0 && len(req.Metadata) == 0 && spec.Network == nil {
			sb, err := g.claim(r.Context(), pool, template)
			if err != nil {
				writeE2B(w, statusOf(err), err.Error())
				return
			}
			if sb != nil {
				body, _ := json.Marshal(map[string]int64{"timeout": *spec.TTLSeconds})
				g.e2bConnectOnNode(w, r, sb, sb.Status.Instances[0].ID, body, http.StatusCreated)
				return
			}
		}
		m := pool.Spec.Member()
		spec.Image, spec.SandboxTemplateRef, spec.ForkFrom = "", m.SandboxTemplateRef, m.ForkFrom
	}
	sb, err := g.create(r.Context(), namespace(r.Context()), "", "e2b-", spec, template)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	g.e2bConnectOnNode(w, r, sb, sb.Status.Instances[0].ID, nil, http.StatusCreated)
}

// e2bSpec is the Sandbox E2B's create body asks for. A templateID names a
// SandboxTemplate in the namespace, or else an image.
func (g *Gateway) e2bSpec(ctx context.Context, ns string, req *e2bapi.CreateRequest) (v1alpha1.SandboxSpec, error) {
	var spec v1alpha1.SandboxSpec
	switch {
	case req.TemplateID == "":
		return spec, errors.New("templateID: required (a SandboxTemplate's name or an image)")
	case req.Timeout != nil && *req.Timeout < 0:
		return spec, errors.New("timeout: must not be negative")
	case req.AutoPause != nil && *req.AutoPause:
		return spec, errors.New("autoPause: not served by the cluster gateway; pause with Sandbox.pause")
	case req.AutoPauseMemory != nil && !*req.AutoPauseMemory:
		return spec, errors.New("autoPauseMemory: false is not supported; a paused smolvm sandbox keeps its memory")
	case req.AutoResume != nil && req.AutoResume.Enabled:
		return spec, errors.New("autoResume: not supported; resume a paused sandbox with Sandbox.connect")
	case len(req.VolumeMounts) > 0:
		return spec, errors.New("volumeMounts: not served by the cluster gateway; volumes are a node's (docs/volumes.md)")
	}
	var netReq e2bapi.NetworkRequest
	if req.Network != nil {
		netReq = *req.Network
	}
	p, err := netReq.Policy(req.AllowInternetAccess, nil)
	if err != nil {
		return spec, err
	}
	spec.Network = networkPolicy(p)
	spec.Labels = req.Metadata
	spec.TTLSeconds = ptr.To(int64(g.cfg.DefaultTTL.Seconds()))
	if req.Timeout != nil {
		spec.TTLSeconds = req.Timeout
	}
	for _, k := range slices.Sorted(maps.Keys(req.EnvVars)) {
		spec.Env = append(spec.Env, v1alpha1.EnvVar{Name: k, Value: req.EnvVars[k]})
	}
	var tmpl v1alpha1.SandboxTemplate
	switch err := g.cfg.Kube.Get(ctx, kclient.ObjectKey{Namespace: ns, Name: req.TemplateID}, &tmpl); {
	case err == nil:
		spec.SandboxTemplateRef = &v1alpha1.LocalRef{Name: req.TemplateID}
		return spec, nil
	case !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err):
		return spec, fmt.Errorf("templateID: %w", err)
	}
	switch snap, err := g.snapshot(ctx, ns, req.TemplateID); {
	case err == nil:
		return restoreSpec(snap, spec.Labels, time.Duration(*spec.TTLSeconds)*time.Second), nil
	case !errors.Is(err, errNotFound):
		return spec, fmt.Errorf("templateID: %w", err)
	}
	spec.Image = req.TemplateID
	switch req.TemplateID {
	case e2bapi.DefaultTemplate, e2bapi.CodeInterpreterTemplate:
		// The code interpreter's kernel starts at the first request to
		// its port (the node's kernels.ensure).
		spec.Image = sandbox.DefaultImage
	}
	return spec, nil
}

func networkPolicy(p *sandbox.Network) *v1alpha1.NetworkPolicy {
	if p == nil {
		return nil
	}
	np := &v1alpha1.NetworkPolicy{Mode: string(p.Mode), AllowHosts: p.Hosts, AllowCIDRs: p.CIDRs}
	for _, port := range p.Ports {
		np.Ports = append(np.Ports, int32(port.Port))
	}
	return np
}

// create makes a Sandbox in ns, named name or else generated from
// prefix, with annotations, and waits until it runs; one that does not is
// deleted, so a failed create leaves nothing behind.
func (g *Gateway) create(ctx context.Context, ns, name, prefix string, spec v1alpha1.SandboxSpec, annotations map[string]string) (*v1alpha1.Sandbox, error) {
	sb := &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, GenerateName: prefix, Annotations: annotations}, Spec: spec}
	done, err := g.admit(ctx, ns)
	if err != nil {
		return nil, err
	}
	err = g.cfg.Kube.Create(ctx, sb)
	done()
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	// A failed object is deleted, so its name (maybe generated) would
	// name nothing.
	what := "the new sandbox"
	if name != "" {
		what = "sandbox " + name
	}
	ready, err := g.waitPhase(ctx, kclient.ObjectKeyFromObject(sb), what, v1alpha1.PhaseRunning)
	if err != nil {
		// The request's context may be what ended.
		if derr := g.cfg.Kube.Delete(context.WithoutCancel(ctx), sb); derr != nil && !apierrors.IsNotFound(derr) {
			g.cfg.Log.Warn("delete a sandbox that did not start", "sandbox", sb.Name, "err", derr)
		}
		return nil, err
	}
	return ready, nil
}

// e2bConnectOnNode answers with the node's E2B view of sandbox id (its
// envd token above all), through the node's connect with body; the
// domain is the gateway's, whose hosts route ports.
func (g *Gateway) e2bConnectOnNode(w http.ResponseWriter, r *http.Request, sb *v1alpha1.Sandbox, id string, body []byte, status int) {
	code, out, err := g.connectOnNode(r.Context(), sb, id, body)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	if code >= 300 {
		writeJSON(w, code, out)
		return
	}
	writeJSON(w, status, out)
}

// connectOnNode calls the node's E2B connect for sandbox id with body, and
// returns its answer with the gateway's domain and sb's template in it.
func (g *Gateway) connectOnNode(ctx context.Context, sb *v1alpha1.Sandbox, id string, body []byte) (int, map[string]any, error) {
	base, err := g.node(ctx, sb)
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	code, err := g.fwd.call(ctx, "POST", base, e2bPrefix+"/sandboxes/"+url.PathEscape(id)+"/connect", body, &out)
	if err != nil {
		return 0, nil, &phaseError{http.StatusBadGateway, err.Error()}
	}
	if code < 300 {
		delete(out, "domain")
		if g.cfg.Domain != "" {
			out["domain"] = g.cfg.Domain
		}
		setTemplate(sb, out)
	}
	return code, out, nil
}

// AnnotationTemplate records on a Sandbox made through E2B the templateID
// its create named (its source's, for a fork's copy). E2B's answers
// report it, as a single smolvm serve does: the node knows only the image
// it maps to ("host" for "base"), or the pool's or snapshot's image.
const AnnotationTemplate = "smolvm.dev/template"

// setTemplate puts sb's recorded template in a node's E2B answer about
// it; one made otherwise keeps the node's (its image).
func setTemplate(sb *v1alpha1.Sandbox, out map[string]any) {
	if t, ok := sb.Annotations[AnnotationTemplate]; ok {
		out["templateID"] = t
	}
}

// e2bInfo answers getInfo: the node's, with sb's template.
func (g *Gateway) e2bInfo(w http.ResponseWriter, r *http.Request) {
	sb, id, base, ok := g.e2bOnNode(w, r)
	if !ok {
		return
	}
	var out map[string]any
	code, err := g.fwd.call(r.Context(), "GET", base, e2bPrefix+"/sandboxes/"+url.PathEscape(id), nil, &out)
	if err != nil {
		writeE2B(w, http.StatusBadGateway, err.Error())
		return
	}
	if code < 300 {
		setTemplate(sb, out)
	}
	writeJSON(w, code, out)
}

// e2bFork answers E2B's fork: a copy per count, each an object of its own
// (fork), each answered as connect answers, or with its error.
func (g *Gateway) e2bFork(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.ForkRequest
	if err := decode(r, &req); err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	if n < 1 || n > sandbox.MaxFork {
		writeE2B(w, http.StatusBadRequest, fmt.Sprintf("count: must be between 1 and %d", sandbox.MaxFork))
		return
	}
	ttl := g.cfg.DefaultTTL
	if req.Timeout != nil {
		if *req.Timeout < 0 {
			writeE2B(w, http.StatusBadRequest, "timeout: must not be negative")
			return
		}
		ttl = time.Duration(*req.Timeout) * time.Second
	}
	src, _, ok := g.e2bLookup(w, r)
	if !ok {
		return
	}
	// Copies answer to their source's template, as on a single serve.
	var template map[string]string
	if t, ok := src.Annotations[AnnotationTemplate]; ok {
		template = map[string]string{AnnotationTemplate: t}
	}
	copies, errs, err := g.fork(r.Context(), src, n, "e2b-", ttl, template)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	type result struct {
		Sandbox map[string]any `json:"sandbox,omitempty"`
		Error   *e2bapi.Error  `json:"error,omitempty"`
	}
	out := make([]result, n)
	for i, c := range copies {
		code, sj := 0, map[string]any(nil)
		err := errs[i]
		if err == nil {
			code, sj, err = g.connectOnNode(r.Context(), c, c.Status.Instances[0].ID, nil)
		}
		switch {
		case err != nil:
			out[i].Error = &e2bapi.Error{Code: statusOf(err), Message: err.Error()}
		case code >= 300:
			out[i].Error = &e2bapi.Error{Code: code, Message: fmt.Sprint(sj["message"])}
		default:
			out[i].Sandbox = sj
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

// e2bConnect answers Sandbox.connect: a paused sandbox is resumed
// through its object (201), a running one returned as it is (200).
func (g *Gateway) e2bConnect(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeE2B(w, http.StatusBadRequest, err.Error())
		return
	}
	sb, id, ok := g.e2bLookup(w, r)
	if !ok {
		return
	}
	status := http.StatusOK
	if sb.Spec.Paused {
		if sb, err = g.setPaused(r.Context(), sb, false); err != nil {
			writeE2B(w, statusOf(err), err.Error())
			return
		}
		status = http.StatusCreated
	}
	g.e2bConnectOnNode(w, r, sb, id, body, status)
}

func (g *Gateway) e2bPause(w http.ResponseWriter, r *http.Request) {
	sb, _, ok := g.e2bLookup(w, r)
	if !ok {
		return
	}
	if sb.Spec.Paused {
		writeE2B(w, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", r.PathValue("id")))
		return
	}
	if _, err := g.setPaused(r.Context(), sb, true); err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setPaused sets sb's spec.paused and waits until its node made it so.
func (g *Gateway) setPaused(ctx context.Context, sb *v1alpha1.Sandbox, paused bool) (*v1alpha1.Sandbox, error) {
	patch := kclient.MergeFrom(sb.DeepCopy())
	sb.Spec.Paused = paused
	if err := g.cfg.Kube.Patch(ctx, sb, patch); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.Name, err)
	}
	want := v1alpha1.PhaseRunning
	if paused {
		want = v1alpha1.PhasePaused
	}
	return g.waitPhase(ctx, kclient.ObjectKeyFromObject(sb), "sandbox "+sb.Name, want)
}

func (g *Gateway) e2bKill(w http.ResponseWriter, r *http.Request) {
	sb, _, ok := g.e2bLookup(w, r)
	if !ok {
		return
	}
	if err := g.remove(r.Context(), sb); err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// remove deletes sb and waits until its node removed its sandboxes. A
// fork's copies are one object: removing one is removing all, so that is
// refused.
func (g *Gateway) remove(ctx context.Context, sb *v1alpha1.Sandbox) error {
	if n := len(sb.Status.Instances); n > 1 {
		return &phaseError{http.StatusConflict, fmt.Sprintf("the sandbox is one of %d copies of Sandbox %s/%s; delete that object to remove them all", n, sb.Namespace, sb.Name)}
	}
	if err := g.cfg.Kube.Delete(ctx, sb); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete sandbox %s: %w", sb.Name, err)
	}
	return g.waitGone(ctx, sb)
}

// e2bForward sends a request about one sandbox to its node.
func (g *Gateway) e2bForward(w http.ResponseWriter, r *http.Request) {
	_, id, base, ok := g.e2bOnNode(w, r)
	if !ok {
		return
	}
	g.fwd.forward(w, r, base, e2bPrefix+withID(r.URL.Path, r.PathValue("id"), id), true)
}

// e2bOnNode finds the sandbox the path's {id} names, its instance's ID
// and its node's URL, or answers E2B's error.
func (g *Gateway) e2bOnNode(w http.ResponseWriter, r *http.Request) (*v1alpha1.Sandbox, string, *url.URL, bool) {
	sb, id, ok := g.e2bLookup(w, r)
	if !ok {
		return nil, "", nil, false
	}
	base, err := g.node(r.Context(), sb)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return nil, "", nil, false
	}
	return sb, id, base, true
}

// withID is path with its sandbox reference ref replaced by the ID id.
func withID(path, ref, id string) string {
	return strings.Replace(path, "/"+ref, "/"+url.PathEscape(id), 1)
}

// e2bLookup finds the sandbox the path's {id} names in the caller's
// namespace, or answers E2B's 404 (the SDK's NotFoundError).
func (g *Gateway) e2bLookup(w http.ResponseWriter, r *http.Request) (*v1alpha1.Sandbox, string, bool) {
	ref := r.PathValue("id")
	sb, err := g.lookup(r.Context(), namespace(r.Context()), ref)
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return nil, "", false
	}
	return sb, instance(sb, ref), true
}

// e2bList asks each node holding the namespace's sandboxes for its E2B
// list (with the caller's filters) and keeps the namespace's. The
// template filter is the gateway's: the nodes know images, not the
// templates asked for (AnnotationTemplate).
func (g *Gateway) e2bList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want := q.Get("template")
	q.Del("template")
	out, err := g.gather(r.Context(), namespace(r.Context()), e2bPrefix+"/v2/sandboxes?"+q.Encode(), func(sb *v1alpha1.Sandbox, item map[string]json.RawMessage) bool {
		if t, ok := sb.Annotations[AnnotationTemplate]; ok {
			item["templateID"], _ = json.Marshal(t)
		}
		var got string
		json.Unmarshal(item["templateID"], &got)
		return want == "" || got == want
	})
	if err != nil {
		writeE2B(w, statusOf(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// gather asks each node holding sandboxes of ns for E2B's list at path,
// and keeps the items whose sandboxID names one of them and that keep
// keeps, as keep may have changed them.
func (g *Gateway) gather(ctx context.Context, ns, path string, keep func(*v1alpha1.Sandbox, map[string]json.RawMessage) bool) ([]json.RawMessage, error) {
	out := []json.RawMessage{}
	err := g.eachNode(ctx, ns, func(base *url.URL, ids map[string]*v1alpha1.Sandbox) error {
		var got []map[string]json.RawMessage
		code, err := g.fwd.call(ctx, "GET", base, path, nil, &got)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return &phaseError{code, fmt.Sprintf("node %s answered %d", base.Host, code)}
		}
		for _, item := range got {
			var id string
			if json.Unmarshal(item["sandboxID"], &id) != nil || ids[id] == nil {
				continue
			}
			if keep(ids[id], item) {
				raw, err := json.Marshal(item)
				if err != nil {
					return err
				}
				out = append(out, raw)
			}
		}
		return nil
	})
	return out, err
}

// eachNode calls fn for each live node holding sandboxes of ns, with the
// IDs of those sandboxes and the object of each. A node that is gone is
// skipped: its sandboxes are Lost, which no list shows.
func (g *Gateway) eachNode(ctx context.Context, ns string, fn func(base *url.URL, ids map[string]*v1alpha1.Sandbox) error) error {
	var list v1alpha1.SandboxList
	if err := g.cfg.Kube.List(ctx, &list, kclient.InNamespace(ns)); err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	type node struct {
		base *url.URL
		ids  map[string]*v1alpha1.Sandbox
	}
	nodes := map[string]*node{}
	for i := range list.Items {
		sb := &list.Items[i]
		if len(sb.Status.Instances) == 0 {
			continue
		}
		n := nodes[sb.Status.NodeName]
		if n == nil {
			base, err := g.node(ctx, sb)
			if err != nil {
				continue
			}
			n = &node{base: base, ids: map[string]*v1alpha1.Sandbox{}}
			nodes[sb.Status.NodeName] = n
		}
		for _, in := range sb.Status.Instances {
			n.ids[in.ID] = sb
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if err := fn(nodes[name].base, nodes[name].ids); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}

// call sends a request with the node's token to path on the node at
// base and decodes its JSON answer into out.
func (f *forwarder) call(ctx context.Context, method string, base *url.URL, path string, body []byte, out any) (int, error) {
	u := *base
	p, q, _ := strings.Cut(path, "?")
	u.Path, u.RawQuery = base.Path+p, q
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", base.Host, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("node %s: %s %s: %w", base.Host, method, p, err)
	}
	return resp.StatusCode, nil
}
