// Package httpapi serves smolvm's native HTTP API (the wire types are in
// package api): the handlers of `smolvm serve` over a manager.Manager,
// with token auth, a concurrency limit and metrics.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
)

// Options configure a Server.
type Options struct {
	Manager   *manager.Manager
	Images    *image.Store
	Snapshots *snapshot.Store
	// Token is the bearer token every request must carry; empty turns
	// auth off (only sensible on a private Unix socket).
	Token string
	// Mounts are extra handlers served under path prefixes, behind the
	// same auth (unless Public), limiter and metrics. The handler sees
	// the full path.
	Mounts []Mount
	// TempDir is where uploads are spooled until complete.
	TempDir string
	// MaxUpload bounds one upload's size (default 1 GiB); MaxDownload one
	// download's (default sandbox.MaxCopyOut).
	MaxUpload, MaxDownload int64
	// MaxInFlight requests run at once (default 128); up to MaxQueue more
	// wait for a slot (default 1024), and the rest get 429.
	MaxInFlight, MaxQueue int
	// DefaultTTL is the time to live of a sandbox created without one
	// (default sandbox.DefaultTTL); ExpiredGrace how long an expired one
	// stays listed (default sandbox.DefaultExpiredGrace).
	DefaultTTL, ExpiredGrace time.Duration
	Logger                   *slog.Logger
}

// Mount is an extra handler under Prefix (a path ending in "/").
type Mount struct {
	Prefix  string
	Handler http.Handler
	// Public skips the server's token check, for handlers that
	// authenticate requests themselves (with CheckToken).
	Public bool
}

// Server serves the API.
type Server struct {
	o       Options
	mux     *http.ServeMux
	limit   *limiter
	metrics *metrics
	// routes lists every registered "METHOD /path" pattern, for the
	// OpenAPI test.
	routes []string
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
	if o.DefaultTTL == 0 {
		o.DefaultTTL = sandbox.DefaultTTL
	}
	if o.ExpiredGrace == 0 {
		o.ExpiredGrace = sandbox.DefaultExpiredGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, mux: http.NewServeMux(), limit: newLimiter(o.MaxInFlight, o.MaxQueue), metrics: newMetrics()}
	s.registerRoutes()
	for _, m := range o.Mounts {
		s.handle(m.Prefix, !m.Public, true, m.Handler)
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes returns every pattern the server registered.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// handle registers h for pattern, wrapped in metrics and, as asked, the
// token check and the concurrency limit.
func (s *Server) handle(pattern string, auth, limited bool, h http.Handler) {
	s.routes = append(s.routes, pattern)
	obs := s.metrics.route(pattern)
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() { obs.observe(rec.status, time.Since(start)) }()
		if auth && !CheckToken(r, s.o.Token) {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="smolvm"`)
			writeError(rec, &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "missing or wrong API token (Authorization: Bearer … or X-API-KEY)"})
			return
		}
		if limited {
			release, err := s.limit.acquire(r.Context())
			if err != nil {
				rec.Header().Set("Retry-After", "1")
				writeError(rec, err)
				return
			}
			defer release()
		}
		h.ServeHTTP(rec, r)
	}))
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
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reapInterval is how often the server looks for expired sandboxes.
const reapInterval = time.Second

func (s *Server) reap(ctx context.Context) {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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

// limiter bounds requests in flight, queueing a bounded number more.
type limiter struct {
	slots chan struct{}
	queue chan struct{}
}

func newLimiter(inFlight, queue int) *limiter {
	return &limiter{slots: make(chan struct{}, inFlight), queue: make(chan struct{}, queue)}
}

func (l *limiter) acquire(ctx context.Context) (func(), error) {
	release := func() { <-l.slots }
	select {
	case l.slots <- struct{}{}:
		return release, nil
	default:
	}
	select {
	case l.queue <- struct{}{}:
	default:
		return nil, &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeBusy, Message: "too many requests in flight; retry"}
	}
	defer func() { <-l.queue }()
	select {
	case l.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeBusy, Message: "gave up waiting for a free slot"}
	}
}
