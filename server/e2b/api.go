package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/jsondup"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// noEnd stands in for the end of a sandbox without a time to live: the
// SDK parses endAt as a date and has no way to say "never".
var noEnd = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

func (h *Handler) apiRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	// Unknown paths (404) and methods (405) are answered by httpguard.Routed.
	handle := func(pattern string, fn http.HandlerFunc) {
		h.routes = append(h.routes, pattern)
		mux.HandleFunc(pattern, checkParams(pattern, fn, writeAPIError))
	}
	handle("POST /sandboxes", h.create)
	handle("POST /v2/sandboxes", h.create)
	handle("GET /sandboxes", h.list)
	handle("GET /v2/sandboxes", h.list)
	handle("GET /sandboxes/{id}", h.getInfo)
	handle("DELETE /sandboxes/{id}", h.kill)
	handle("POST /sandboxes/{id}/timeout", h.setTimeout)
	handle("POST /sandboxes/{id}/connect", h.connect)
	handle("POST /v2/sandboxes/{id}/connect", h.connect)
	handle("POST /sandboxes/{id}/resume", h.connect)
	handle("POST /sandboxes/{id}/pause", h.pause)
	handle("PUT /sandboxes/{id}/network", h.updateNetwork)
	handle("POST /sandboxes/{id}/fork", h.fork)
	handle("GET /sandboxes/{id}/metrics", h.metrics)
	handle("POST /sandboxes/{id}/snapshots", h.createSnapshot)
	handle("GET /snapshots", h.listSnapshots)
	handle("DELETE /templates/{template}", h.deleteTemplate)
	if h.builds != nil { // otherwise unserved (unserved.go)
		h.templateRoutes(mux, handle)
	}
	h.volumeRoutes(handle)
	return mux
}

func writeAPIError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, e2bapi.Error{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpguard.WriteJSON(w, status, v) }

// decodeBody decodes a JSON request body into v; an empty body leaves v
// as it is. The error names the field at fault (a key given twice too).
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(b) > maxRequest {
		return fmt.Errorf("body larger than %d bytes", maxRequest)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if !utf8.Valid(b) {
		return errors.New("body: not valid UTF-8")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed JSON body: %s", describeJSONError(err))
	}
	if err := jsondup.Check(b, v); err != nil {
		return fmt.Errorf("malformed JSON body: %w", err)
	}
	return nil
}

// sandboxJSON is E2B's Sandbox: the reply to create, connect and fork.
type sandboxJSON struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// Domain makes the SDK's getHost(port) PORT-ID.Domain, which serve
	// routes to the port (Handler.ServeHost); the SDK sends
	// TrafficAccessToken to such ports (the code interpreter does).
	Domain             string `json:"domain,omitempty"`
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	// AllowInternetAccess and Network say what the sandbox may reach.
	AllowInternetAccess bool         `json:"allowInternetAccess"`
	Network             *networkJSON `json:"network,omitempty"`
	// Lifecycle is what the timeout does (getInfo().lifecycle).
	Lifecycle    lifecycleJSON        `json:"lifecycle"`
	VolumeMounts []e2bapi.VolumeMount `json:"volumeMounts"`
}

// lifecycleJSON is E2B's SandboxLifecycle. smolvm resumes a paused
// sandbox on connect only, never on traffic, so AutoResume is false.
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

func (h *Handler) newSandboxJSON(sb *sandbox.Sandbox, in Info) sandboxJSON {
	token := h.envdToken(sb.ID)
	return sandboxJSON{
		TemplateID: in.templateID(sb), SandboxID: sb.ID, Alias: sb.Name, ClientID: "smolvm",
		EnvdVersion: EnvdVersion, EnvdAccessToken: token,
		Domain: h.domain, TrafficAccessToken: trafficToken(token),
	}
}

func newDetailJSON(sb *sandbox.Sandbox, in Info) detailJSON {
	d := detailJSON{
		TemplateID: in.templateID(sb), SandboxID: sb.ID, Alias: sb.Name, ClientID: "smolvm",
		StartedAt: sb.CreatedAt, EndAt: noEnd,
		CPUCount:   int(math.Ceil(sb.Config.Limits.CPUs)),
		MemoryMB:   sb.Config.Limits.Memory >> 20,
		DiskSizeMB: sb.Config.Limits.Disk >> 20,
		Metadata:   in.Metadata, State: string(sb.State), EnvdVersion: EnvdVersion,
		VolumeMounts: volumeMountsJSON(sb),
		Lifecycle:    lifecycleJSON{OnTimeout: "kill"},
	}
	if sb.Config.OnExpiry == sandbox.ExpiryPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	if sb.StartedAt != nil {
		d.StartedAt = *sb.StartedAt
	}
	if sb.ExpiresAt != nil {
		d.EndAt = *sb.ExpiresAt
	}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	if p := sb.Config.Network; p != nil {
		d.AllowInternetAccess = p.Mode == sandbox.NetFull
		if p.Mode == sandbox.NetEgress {
			d.Network = &networkJSON{AllowOut: append(append([]string{}, p.Hosts...), p.CIDRs...)}
		}
	}
	return d
}

// live reports whether E2B would call sb a sandbox at all: E2B knows only
// running and paused sandboxes; a stopped one is gone.
func live(sb *sandbox.Sandbox) bool {
	return sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused
}

// networkJSON reports a sandbox's policy the way E2B's SandboxDetail does.
type networkJSON struct {
	AllowOut []string `json:"allowOut"`
}

// Create returns only once the sandbox's agent answers: the SDK does not
// poll for readiness and sends its first command straight away.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.CreateRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.TemplateID == "" {
		writeAPIError(w, http.StatusBadRequest, "templateID: required (a smolvm image name)")
		return
	}
	if err := names.Check(names.Image, req.TemplateID); err != nil {
		writeAPIError(w, http.StatusBadRequest, "templateID: "+err.Error())
		return
	}
	if req.Timeout != nil && *req.Timeout < 0 {
		writeAPIError(w, http.StatusBadRequest, "timeout: must not be negative")
		return
	}
	if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
		writeAPIError(w, http.StatusBadRequest, "autoPauseMemory: false is not supported; a paused smolvm sandbox keeps its memory")
		return
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		writeAPIError(w, http.StatusBadRequest, "autoResume: not supported; resume a paused sandbox with Sandbox.connect")
		return
	}
	var netReq e2bapi.NetworkRequest
	if req.Network != nil {
		netReq = *req.Network
	}
	// E2B sandboxes reach the internet unless told not to; smolvm's have
	// no network unless asked.
	netPolicy, err := netReq.Policy(req.AllowInternetAccess, nil)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Metadata are the sandbox's labels too: usage by label sums them.
	opts := sandbox.CreateOptions{Start: true, Config: sandbox.Config{TTL: h.ttl, Network: netPolicy, Labels: req.Metadata, Volumes: volumeMounts(req.VolumeMounts)}}
	if req.AutoPause != nil && *req.AutoPause {
		// lifecycle.onTimeout: 'pause'; smolvm serve's reaper pauses it.
		opts.Config.OnExpiry = sandbox.ExpiryPause
	}
	// A warm pool of that name wins: it holds started sandboxes of an
	// image (by default it is named after it), so create skips the boot;
	// but its members mount no volumes.
	if _, err := h.m.Pool(r.Context(), req.TemplateID); err == nil && len(req.VolumeMounts) == 0 {
		opts.Pool = req.TemplateID
	} else {
		opts.Image = req.TemplateID
	}
	if req.Timeout != nil {
		opts.Config.TTL = time.Duration(*req.Timeout) * time.Second
	}
	if req.AllowInternetAccess == nil && req.Network == nil {
		// A template's started state keeps the network it was built with
		// (none): E2B's default of the internet is not a request that its
		// restore must refuse; an explicit one is (Manager.fromTemplate).
		if t, err := h.m.Template(r.Context(), req.TemplateID); err == nil && t.Snapshot != "" {
			opts.Config.Network = nil
		}
	}
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("envVars: invalid name %q", k))
			return
		}
		opts.Config.Env = append(opts.Config.Env, k+"="+v)
	}
	sb, err := h.m.Create(r.Context(), opts)
	switch {
	case errors.Is(err, sandbox.ErrImageNotFound):
		sb, err = h.fromTemplate(r.Context(), req.TemplateID, opts)
	case err == nil && req.TemplateID == e2bapi.CodeInterpreterTemplate:
		// A warm pool (or an image) of that name: the template's
		// sandboxes run the code interpreter, however they are made.
		sb, err = h.withKernel(r.Context(), sb)
	}
	if errors.Is(err, sandbox.ErrImageNotFound) || errors.Is(err, sandbox.ErrInvalidImageRef) {
		// A template that names nothing is a bad argument to create.
		err = errdefs.New(errdefs.ErrInvalid, "templateID: "+err.Error())
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	in := Info{Metadata: req.Metadata, Template: req.TemplateID}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	if err := h.st.SaveInfo(r.Context(), sb.ID, in); err != nil {
		h.m.Remove(r.Context(), sb.ID, true)
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.newSandboxJSON(sb, in))
}

// lookup returns the live sandbox id names, or writes E2B's 404 (which
// the SDK turns into NotFoundError). The manager's message says whether the
// sandbox never existed, expired or was removed, and when.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, id string) (*sandbox.Sandbox, bool) {
	sb, err := h.m.Get(r.Context(), id)
	switch {
	case err != nil:
		writeErr(w, err)
		return nil, false
	case !live(sb):
		writeAPIError(w, http.StatusNotFound, notLive(sb))
		return nil, false
	}
	return sb, true
}

func (h *Handler) getInfo(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	in, err := h.loadInfo(r.Context(), sb)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, newDetailJSON(sb, in))
}

// list answers GET /v2/sandboxes: running and paused sandboxes, filtered
// by state=running,paused, metadata=k%3Dv%26k2%3Dv2, template and
// startedAfter as the SDK sends them, a page at a time (page.go).
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	states := map[string]bool{}
	for _, s := range strings.Split(q.Get("state"), ",") {
		switch s {
		case "":
		case "running", "paused":
			states[s] = true
		default:
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("state: %q is not running or paused", s))
			return
		}
	}
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "metadata: "+err.Error())
		return
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("startedAfter: %q is not an RFC 3339 time", v))
			return
		}
	}
	template := q.Get("template")
	pg, err := pageOf(q)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	// E2B state first: a row is saved only after its sandbox's record
	// exists, so any row the later List lacks belongs to a sandbox that
	// is gone (removed by the CLI, reaped after expiry) and can go too;
	// but only in an unscoped list: a tenant's lacks every other tenant's
	// sandboxes, whose envd tokens and metadata must stay.
	infos, err := h.st.AllInfo(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	sbs, err := h.m.List(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []detailJSON{}
	for _, sb := range sbs {
		in := infos[sb.ID]
		delete(infos, sb.ID)
		if !live(sb) || (len(states) > 0 && !states[string(sb.State)]) || !matches(in.Metadata, want) {
			continue
		}
		if d := newDetailJSON(sb, in); (template == "" || d.TemplateID == template) && d.StartedAt.After(after) {
			out = append(out, d)
		}
	}
	if _, scoped := tenant.Of(r.Context()); !scoped {
		for id := range infos {
			h.st.DeleteInfo(r.Context(), id)
		}
	}
	writeJSON(w, http.StatusOK, pg.cut(w, out))
}

// metadataFilter decodes the metadata query of a list: the SDK encodes
// each key and value with encodeURIComponent, then the pairs as a query
// string ("k%3Dv%26k2%3Dv%2520w" once in the URL), so each key and value
// is escaped once more inside it.
func metadataFilter(q string) (map[string]string, error) {
	pairs, err := url.ParseQuery(q)
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for k, vs := range pairs {
		key, err := url.PathUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		want[key] = v
	}
	return want, nil
}

// matches reports whether md holds every pair of want.
func matches(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	h.procs.forget(sb.ID)
	if err := h.m.Remove(r.Context(), sb.ID, true); err != nil {
		writeErr(w, err)
		return
	}
	if err := h.st.DeleteInfo(r.Context(), sb.ID); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"` // seconds
}

// parseTimeout decodes a {timeout: seconds} body; required says whether
// the field must be present.
func parseTimeout(r *http.Request, required bool) (*time.Duration, error) {
	var req timeoutRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if req.Timeout == nil {
		if required {
			return nil, errors.New("timeout: required (seconds)")
		}
		return nil, nil
	}
	if *req.Timeout < 0 {
		return nil, errors.New("timeout: must not be negative")
	}
	d := time.Duration(*req.Timeout) * time.Second
	return &d, nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	ttl, err := parseTimeout(r, true)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	if _, err := h.m.SetTTL(r.Context(), sb.ID, *ttl); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect answers Sandbox.connect: a paused sandbox is resumed (201), a
// running one is returned as it is (200), with its timeout reset if asked.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	ttl, err := parseTimeout(r, false)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	status := http.StatusOK
	if sb.State == sandbox.StatePaused {
		resumed, err := h.m.Resume(r.Context(), sb.ID)
		if errors.Is(err, errdefs.ErrConflict) {
			// Resumed meanwhile, by another connect or a cluster node
			// honouring a claim: running is what was asked for.
			if now, gerr := h.m.Get(r.Context(), sb.ID); gerr == nil && now.State == sandbox.StateRunning {
				resumed, err = now, nil
			}
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		sb, status = resumed, http.StatusCreated
	}
	if ttl != nil {
		if sb, err = h.m.SetTTL(r.Context(), sb.ID, *ttl); err != nil {
			writeErr(w, err)
			return
		}
	}
	// A sandbox made outside the E2B API gets its E2B state now.
	in, err := h.loadInfo(r.Context(), sb)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, status, h.newSandboxJSON(sb, in))
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	if sb.State == sandbox.StatePaused {
		writeAPIError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is already paused", sb.ID))
		return
	}
	if _, err := h.m.Pause(r.Context(), sb.ID); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forkResult is one element of E2B's fork reply: a sandbox or an error.
type forkResult struct {
	Sandbox *sandboxJSON  `json:"sandbox,omitempty"`
	Error   *e2bapi.Error `json:"error,omitempty"`
}

func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.ForkRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	if n < 1 || n > sandbox.MaxFork {
		writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("count: must be between 1 and %d", sandbox.MaxFork))
		return
	}
	if req.Timeout != nil && *req.Timeout < 0 {
		writeAPIError(w, http.StatusBadRequest, "timeout: must not be negative")
		return
	}
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	src, err := h.loadInfo(r.Context(), sb)
	if err != nil {
		writeErr(w, err)
		return
	}
	// Copies carry the source's kernel: their first runCode need not
	// check for it (a kernel gone meanwhile fails one request, as in the
	// source).
	kernelUp := h.kernels.known(sb.ID)
	forks, err := h.m.Fork(r.Context(), sb.ID, sandbox.ForkOptions{N: n})
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]forkResult, 0, len(forks))
	for _, f := range forks {
		if kernelUp {
			h.kernels.mark(f.ID)
		}
		in := Info{Metadata: src.Metadata, Template: src.Template}
		err := h.st.SaveInfo(r.Context(), f.ID, in)
		if err == nil && req.Timeout != nil {
			f, err = h.m.SetTTL(r.Context(), f.ID, time.Duration(*req.Timeout)*time.Second)
		}
		if err != nil {
			out = append(out, forkResult{Error: &e2bapi.Error{Code: statusOf(err), Message: err.Error()}})
			continue
		}
		sj := h.newSandboxJSON(f, in)
		out = append(out, forkResult{Sandbox: &sj})
	}
	writeJSON(w, http.StatusCreated, out)
}

// metricJSON is one of E2B's SandboxMetric samples. Disk use is not
// measured (the writable layer lives in gVisor's overlay file), so it is
// left out rather than reported as zero.
type metricJSON struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    int64     `json:"memUsed"`
	MemTotal   int64     `json:"memTotal"`
	DiskTotal  int64     `json:"diskTotal"`
}

// metrics answers getMetrics with one sample, taken now: smolvm keeps no
// history. CPU use is the average since the sandbox started.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	st, err := h.m.Stats(r.Context(), sb.ID)
	if err != nil {
		writeErr(w, err)
		return
	}
	now := time.Now()
	m := metricJSON{
		Timestamp: now, CPUCount: int(math.Ceil(sb.Config.Limits.CPUs)),
		MemUsed: st.MemoryBytes, MemTotal: sb.Config.Limits.Memory, DiskTotal: sb.Config.Limits.Disk,
	}
	if sb.StartedAt != nil && now.After(*sb.StartedAt) && m.CPUCount > 0 {
		m.CPUUsedPct = 100 * float64(st.CPUNanos) / float64(now.Sub(*sb.StartedAt).Nanoseconds()) / float64(m.CPUCount)
	}
	writeJSON(w, http.StatusOK, []metricJSON{m})
}

// updateNetwork answers Sandbox.updateNetwork: a sandbox created with a
// network gets a new allow-list (false: an empty one); one created without
// cannot get one later (409).
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NetworkRequest
	if err := decodeBody(r, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	p, err := req.Policy(req.AllowInternetAccess, &sandbox.Network{Mode: sandbox.NetEgress})
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	sb, ok := h.lookup(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	if p != nil {
		if _, err := h.m.NetUpdate(r.Context(), sb.ID, *p); err != nil {
			writeErr(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
