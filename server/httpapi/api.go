// Package httpapi serves smolvm's native HTTP API (the wire types are in
// package api): the handlers of `smolvm serve` over a sandbox.Runtime,
// with token auth, a concurrency limit and metrics.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/workflow/branch"
	"smolvm.dev/smolvm/workflow/runner"
)

// Options configure a Server.
type Options struct {
	// Manager runs the sandboxes: runtime/manager on this host.
	Manager sandbox.Runtime
	// Images and Snapshots are its image and snapshot stores.
	Images    sandbox.Images
	Snapshots sandbox.Snapshots
	// Token is the bearer token every request must carry; empty turns
	// auth off (only sensible on a private Unix socket). It is the admin's:
	// it sees every tenant's objects. The keys of the Manager's tenants
	// are admitted too, each request then scoped to its tenant (see
	// Authenticate).
	Token string
	// Mounts are extra handlers served under path prefixes, behind the
	// same auth and path checks (unless Public), limiter and metrics. The
	// handler sees the full path.
	Mounts []Mount
	// Root, when set, serves what nothing else claims: a path outside
	// /v1/ that no route or mount serves, with any method. It is public
	// as a Public mount is (it checks tokens and paths itself, and takes
	// its slots), behind metrics. smolvm serve gives it E2B's API, whose
	// SDKs then work with the server's root as their base URL.
	Root http.Handler
	// TempDir is where uploads are spooled until complete.
	TempDir string
	// MaxUpload bounds one upload's size (default 1 GiB); MaxDownload one
	// download's (default sandbox.MaxCopyOut).
	MaxUpload, MaxDownload int64
	// MaxInFlight requests run at once (default 128); up to MaxQueue more
	// wait for a slot (default 1024), and the rest get 429. One tenant
	// (the admin is one too) holds at most MaxInFlightPerTenant (default
	// half of MaxInFlight) and waits in the same share of the queue.
	MaxInFlight, MaxQueue, MaxInFlightPerTenant int
	// Limiter, when set, is the limiter instead, shared with the handlers
	// of Public mounts and Root (E2B's API), which take their slots
	// themselves once they know who is asking.
	Limiter *httpguard.Limiter
	// BodyTimeout and MinBodyRate pace every request body (httpguard.Pace:
	// whole within BodyTimeout plus a second per MinRate bytes, or 408);
	// 0 is httpguard's default. BodyTimeout also bounds the wait for an
	// exec WebSocket's first message.
	BodyTimeout time.Duration
	MinBodyRate int64
	// DefaultTTL is the time to live of a sandbox created without one
	// (default sandbox.DefaultTTL); ExpiredGrace how long an expired one
	// stays listed (default sandbox.DefaultExpiredGrace).
	DefaultTTL, ExpiredGrace time.Duration
	Logger                   *slog.Logger
	// Ports forwards GET|POST|… /v1/sandboxes/{id}/ports/{port}/… to
	// that port inside the sandbox; nil leaves the route unserved (501).
	Ports *ports.Proxy
	// Runner serves /v1/agent/runs (nil: 501), over this Manager; runs
	// keep their scratch repositories in RunsDir. Getenv configures the
	// built-in agent's model (SMOLVM_MODEL_*; nil: none).
	Runner  *runner.Runner
	RunsDir string
	Getenv  func(string) string
	// Branches serves /v1/agent/branches (nil: 501): the fan-outs and
	// merge queues of smolvm branch, as its status reads them.
	Branches *branch.Coordinator
	// Session, when set, admits a request that carries no API key by a
	// browser session (server/console's Admit): r acting as its
	// principal, false for none; an error refuses it (403: an action
	// without the session's CSRF token).
	Session func(*http.Request) (*http.Request, bool, error)
}

// Mount is an extra handler under Prefix (a path ending in "/"), or for
// the requests Host picks whatever their path.
type Mount struct {
	Prefix string
	// Host, when set, takes the requests whose Host header it accepts,
	// before any path is looked at, and without the concurrency limit:
	// it is for traffic forwarded as a whole (a sandbox's ports by name),
	// whose connections may live long.
	Host    func(host string) bool
	Handler http.Handler
	// Public skips the server's token and path checks and the limiter,
	// for handlers that authenticate requests themselves (with CheckToken)
	// and answer in their own error shape: they must check paths
	// (httpguard.Path) and names too, and take a slot from
	// Options.Limiter once a request is authenticated. A mount gets every
	// path under Prefix, ".." and all.
	Public bool
}

// Server serves the API.
type Server struct {
	o       Options
	mux     *http.ServeMux
	limit   *httpguard.Limiter
	metrics *metrics
	// routes lists every registered "METHOD /path" pattern, for the
	// OpenAPI test.
	routes []string
	// public holds the patterns served without a token; proxied those
	// forwarded to a sandbox, whose paths may have empty segments.
	public, proxied map[string]bool
	mounts          []mount
	root            http.Handler // Options.Root, guarded; nil for none
	runs            agentRuns
}

// mount is a Mount with its handler wrapped.
type mount struct {
	prefix string
	host   func(string) bool
	public bool
	h      http.Handler
}

// takes reports whether m serves r.
func (m *mount) takes(r *http.Request) bool {
	if m.host != nil {
		return m.host(r.Host)
	}
	return strings.HasPrefix(r.URL.Path, m.prefix)
}

// body says how a route takes its request body: up to limit bytes (0: the
// handler's business, for mounts), read whole before the handler runs
// unless stream; or none at all, when a body is a 400.
type body struct {
	limit  int64
	stream bool
	none   bool
}

// New returns a Server for o.
func New(o Options) *Server {
	if o.MaxUpload == 0 {
		o.MaxUpload = 1 << 30
	}
	if o.MaxDownload == 0 {
		o.MaxDownload = sandbox.MaxCopyOut
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 128
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = 1024
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = httpguard.DefaultBodyTimeout
	}
	if o.MinBodyRate == 0 {
		o.MinBodyRate = httpguard.DefaultMinBodyRate
	}
	if o.DefaultTTL == 0 {
		o.DefaultTTL = sandbox.DefaultTTL
	}
	if o.ExpiredGrace == 0 {
		o.ExpiredGrace = sandbox.DefaultExpiredGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Limiter == nil {
		o.Limiter = httpguard.NewLimiter(o.MaxInFlight, o.MaxQueue, o.MaxInFlightPerTenant)
	}
	s := &Server{o: o, mux: http.NewServeMux(), limit: o.Limiter, metrics: newMetrics(), public: map[string]bool{}, proxied: map[string]bool{}}
	s.registerRoutes()
	for _, m := range o.Mounts {
		if m.Host != nil {
			s.mounts = append(s.mounts, mount{host: m.Host, public: m.Public, h: s.guard("ports by host", false, body{}, m.Handler)})
			continue
		}
		s.routes = append(s.routes, m.Prefix)
		s.mounts = append(s.mounts, mount{prefix: m.Prefix, public: m.Public, h: s.guard(m.Prefix, !m.Public, body{}, m.Handler)})
	}
	if o.Root != nil {
		s.root = s.guard("/", false, body{}, o.Root)
	}
	return s
}

// ServeHTTP checks the token before anything else, so that a caller
// without one learns nothing about routes (every path and method gets
// 401), then the path, then routes. Mounts get their whole prefix; a
// Public one checks tokens and paths itself, in its own error shape, as
// Root does for what nothing else claims.
// Every body is paced from the start, whoever reads it (Options.BodyTimeout).
// Whatever the answer, the rest of an unread body is drained (bounded), so
// a client still sending gets the answer, not a reset.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r = httpguard.Pace{Timeout: s.o.BodyTimeout, MinRate: s.o.MinBodyRate}.Hold(w, r)
	defer httpguard.Drain(w, r)
	for _, m := range s.mounts {
		if m.takes(r) {
			if m.public {
				m.h.ServeHTTP(w, r)
			} else if r, ok := s.admit(w, r, ""); ok {
				m.h.ServeHTTP(w, r)
			}
			return
		}
	}
	_, pattern := s.mux.Handler(r)
	if pattern == "" && s.root != nil && s.unclaimed(r) {
		s.root.ServeHTTP(w, r)
		return
	}
	r, ok := s.admit(w, r, pattern)
	if !ok {
		return
	}
	if httpguard.Routed(w, r, s.mux, fail) {
		s.mux.ServeHTTP(w, r)
	}
}

// unclaimed reports whether r, which no route matches, is Root's: its
// path is outside /v1/ and no route serves it with another method.
func (s *Server) unclaimed(r *http.Request) bool {
	p := r.URL.Path
	return p != "/v1" && !strings.HasPrefix(p, "/v1/") && len(httpguard.Allowed(s.mux, r)) == 0
}

// fail writes an error the guards found, with the code for its status.
func fail(w http.ResponseWriter, status int, msg string) {
	writeError(w, &api.Error{Status: status, Code: codeFor(status), Message: msg})
}

// codeFor is the code of an error the guards (or net/http) found.
func codeFor(status int) string {
	code := map[int]string{http.StatusNotFound: api.CodeNotFound, http.StatusMethodNotAllowed: api.CodeMethod,
		http.StatusRequestEntityTooLarge: api.CodeTooLarge, http.StatusRequestHeaderFieldsTooLarge: api.CodeTooLarge,
		http.StatusRequestTimeout: api.CodeTimeout, http.StatusTooManyRequests: api.CodeBusy, http.StatusServiceUnavailable: api.CodeBusy,
		http.StatusNotImplemented: api.CodeUnsupported, http.StatusHTTPVersionNotSupported: api.CodeUnsupported}[status]
	if code == "" {
		code = api.CodeInvalid
	}
	return code
}

// Listener wraps ln, the listener srv is to serve on, so that net/http's
// own answers to requests it cannot parse (a malformed request line or
// header, headers too large, an unknown transfer encoding or HTTP
// version) are in the API's error shape (httpguard.Listener); errorLog
// gets TLS handshake failures.
func Listener(ln net.Listener, errorLog *log.Logger) net.Listener {
	return &httpguard.Listener{Listener: ln, Log: errorLog, Body: func(status int, msg string) []byte {
		b, _ := json.Marshal(&api.Error{Code: codeFor(status), Message: msg})
		return b
	}}
}

// admit checks the key (unless pattern is public) and the path,
// answering 401 or 400 itself. It returns r acting as the key's tenant.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, bool) {
	if !s.public[pattern] {
		var ok bool
		if r, ok = s.authenticate(w, r, pattern); !ok {
			return r, false
		}
	}
	check := httpguard.Path
	if s.proxied[pattern] {
		check = httpguard.ForwardedPath
	}
	if err := check(r); err != nil {
		writeError(w, invalid("", err.Error()))
		return r, false
	}
	return r, true
}

// tenants returns the Manager's tenants, nil without a Manager (tests of
// the guards alone).
func (s *Server) tenants() sandbox.Tenants {
	if s.o.Manager == nil {
		return nil
	}
	return s.o.Manager.Tenants()
}

// Routes returns every pattern the server registered.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// handle registers h for pattern behind guard; without auth it is served
// without a token.
func (s *Server) handle(pattern string, auth, limited bool, b body, h http.Handler) {
	s.routes = append(s.routes, pattern)
	if !auth {
		s.public[pattern] = true
	}
	s.mux.Handle(pattern, s.guard(pattern, limited, b, h))
}

// guard wraps h in metrics, the checks of its path parameters (each with
// the names rule of its kind) and of the body's size, and if limited the
// concurrency limit. A route whose parameter has no rule is a bug found
// here, at start-up.
func (s *Server) guard(pattern string, limited bool, b body, h http.Handler) http.Handler {
	if err := httpguard.Known(pattern); err != nil {
		panic(err)
	}
	obs := s.metrics.route(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() { obs.observe(rec.status, time.Since(start)) }()
		if err := httpguard.Params(r, pattern); err != nil {
			writeError(rec, err)
			return
		}
		var err error
		switch {
		case b.none:
			err = httpguard.NoBody(r, pattern)
		case b.limit > 0:
			err = httpguard.Declared(r, b.limit)
		}
		if err != nil {
			httpguard.RefuseBody(rec, err, fail)
			return
		}
		if limited {
			release, err := s.limit.Acquire(r.Context(), tenant.Owner(r.Context()))
			if err != nil {
				httpguard.RefuseBusy(rec, err, fail)
				return
			}
			defer release()
		}
		if b.limit > 0 && !b.stream {
			if err := httpguard.Buffer(r, b.limit); err != nil {
				httpguard.RefuseBody(rec, err, fail)
				return
			}
		}
		h.ServeHTTP(rec, r)
	})
}

// Run serves until ctx ends, then shuts down, giving open requests a
// moment; in the background it removes sandboxes expired past the grace
// period and notices expiries, so that events report them promptly.
func (s *Server) Run(ctx context.Context, srv *http.Server, serve func() error) error {
	srv.Handler = s
	go s.reap(ctx)
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	// Agent runs end as stopped, their best checkpoint standing.
	s.stopRuns(30 * time.Second)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reapInterval is how often the server looks for expired sandboxes; it
// accounts usage every accountEvery of those.
const (
	reapInterval = time.Second
	accountEvery = 5
)

func (s *Server) reap(ctx context.Context) {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if tick%accountEvery == 0 {
			if err := s.o.Manager.Account(ctx); err != nil && ctx.Err() == nil {
				s.o.Logger.Warn("usage accounting", "err", err)
			}
		}
		removed, err := s.o.Manager.Reap(ctx, s.o.ExpiredGrace)
		for _, n := range removed {
			s.o.Logger.Info("removed expired sandbox", "name", n)
		}
		if err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("reap", "err", err)
		}
	}
}

// statusRecorder remembers the status for metrics and keeps Flush and
// Hijack reachable (http.ResponseController unwraps it).
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
