package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/console"
	"smolvm.dev/smolvm/server/e2b"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/workflow/branch"
	"smolvm.dev/smolvm/workflow/runner"
	"smolvm.dev/smolvm/workflow/trust"
)

// SocketName is the default API socket's name in the data dir.
const SocketName = "smolvm.sock"

// E2BPrefix is where serve answers E2B's API, besides the root: point
// E2B_API_URL and E2B_SANDBOX_URL at http(s)://HOST:PORT or at
// http(s)://HOST:PORT/e2b.
const E2BPrefix = "/e2b"

func (a *app) serveCmd() *cobra.Command {
	var (
		listen, certFile, keyFile, maxUpload, domain, bodyRate string
		insecure, noAuth                                       bool
		inFlight, queue, perTenant                             int
		defaultTTL, grace, bodyTimeout                         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (a Unix socket in the data dir by default)",
		Long: `Serve smolvm's HTTP API. By default it listens on a Unix socket in the data
dir (mode 0600). --listen HOST:PORT listens on TCP; off loopback that needs
--tls-cert and --tls-key, or --insecure. Every request needs the API token
(Authorization: Bearer TOKEN, or X-API-KEY: TOKEN), generated at the first
start and shown by "smolvm serve token".

Point the CLI at it with SMOLVM_HOST=unix:///path or http(s)://host:port
and SMOLVM_TOKEN. The API is described at GET /openapi.json.

E2B's API is served under /e2b, and at the root too (around /v1, /healthz,
/metrics and /openapi.json, which it does not use): the official E2B SDKs work
unmodified with E2B_API_URL and E2B_SANDBOX_URL set to http(s)://HOST:PORT
(or http(s)://HOST:PORT/e2b) and E2B_API_KEY set to the token.

A port a process listens on inside a sandbox (on 127.0.0.1 or 0.0.0.0) is
reached at /v1/sandboxes/ID/ports/PORT/PATH with the API token, and, with
--domain DOMAIN, at any path of the host PORT-ID.DOMAIN, which is what E2B's
getHost(port) returns (point a wildcard DNS record *.DOMAIN at this server).
Those take the API token or the sandbox's E2B tokens (E2B-Traffic-Access-Token,
X-Access-Token). The sandbox needs no network for either.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			limit, err := units.ParseBytes(maxUpload)
			if err != nil {
				return fmt.Errorf("--max-upload: %w", err)
			}
			pace, err := bodyPace(bodyTimeout, bodyRate)
			if err != nil {
				return err
			}
			if inFlight < 1 || queue < 1 || perTenant < 0 {
				return errors.New("--max-in-flight and --max-queue must be at least 1, --max-in-flight-per-tenant not negative")
			}
			if listen == "" {
				listen = "unix://" + filepath.Join(a.dataDir, SocketName)
			}
			ln, tlsOn, err := listenAPI(listen, certFile, keyFile, insecure)
			if err != nil {
				return err
			}
			defer ln.Close()
			token := ""
			if noAuth {
				if ln.Addr().Network() != "unix" {
					return errors.New("--no-auth: only on a Unix socket, whose file mode guards it")
				}
			} else if token, err = httpapi.LoadToken(a.dataDir); err != nil {
				return err
			}
			e, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer e.Close()
			tmp := filepath.Join(a.dataDir, "tmp")
			if err := os.MkdirAll(tmp, 0o700); err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(a.stderr, nil))
			// A crash (kill -9, power loss) may have left creates half-made:
			// finish or remove them before serving, so no one needs smolvm gc.
			completed, removed, err := e.mgr.Recover(ctx)
			for _, n := range completed {
				logger.Info("completed a create cut short by a crash", "sandbox", n)
			}
			for _, what := range removed {
				logger.Info("removed what a crash left", "what", what)
			}
			if err != nil {
				logger.Warn("recovery after a crash", "err", err)
			}
			// One limiter for both APIs: E2B's takes its slots once it
			// knows the request's tenant.
			limiter := httpguard.NewLimiter(inFlight, queue, perTenant)
			proxy := ports.New(e.mgr.DialPort)
			defer proxy.Close()
			// E2B's API under /e2b/, and at the root around /v1/ (its
			// paths never clash with the native API's), so that the SDKs
			// work with either base URL. Its envd requests carry a
			// per-sandbox access token, not the API token, so it checks
			// tokens itself.
			// E2B's template builds are Dockerfile builds (runtime/build).
			builder, err := build.New(ctx, e.mgr, a.dataDir)
			if err != nil {
				return err
			}
			e2bState, err := e2b.OpenState(ctx, e.st)
			if err != nil {
				return err
			}
			e2bAPI, err := e2b.New(ctx, e2b.Options{
				Manager: e.mgr, State: e2bState, Snapshots: e.snaps, MaxUpload: limit, DefaultTTL: defaultTTL,
				Builder: builder, UploadDir: tmp, Images: e.images,
				Authorize: func(r *http.Request) (*http.Request, bool) { return httpapi.Authenticate(r, token, e.mgr.Tenants()) },
				Ports:     proxy, Domain: domain, Limiter: limiter,
				Where: "smolvm serves E2B's API at the root and under " + E2BPrefix + ", and its own under /v1",
			})
			if err != nil {
				return err
			}
			defer e2bAPI.Close()
			runLog, err := runner.OpenLog(ctx, e.st)
			if err != nil {
				return err
			}
			branches, err := branch.OpenStore(ctx, e.st)
			if err != nil {
				return err
			}
			ledger, err := trust.OpenLedger(ctx, e.st)
			if err != nil {
				return err
			}
			// The console's sessions reference the key they signed in
			// with, which only the tenant store itself names.
			keys, err := tenant.Open(ctx, e.st)
			if err != nil {
				return err
			}
			rn := &runner.Runner{Service: e.mgr, Log: runLog, Ledger: ledger}
			con, err := console.New(ctx, console.Options{Store: e.st, ResolveKey: keys.ResolveKey, Token: token})
			if err != nil {
				return err
			}
			srv := httpapi.New(httpapi.Options{
				Manager: e.mgr, Images: e.images, Snapshots: e.snaps, Token: token, TempDir: tmp,
				MaxUpload: limit, Limiter: limiter, BodyTimeout: pace.Timeout, MinBodyRate: pace.MinRate,
				DefaultTTL: defaultTTL, ExpiredGrace: grace, Logger: logger, Ports: proxy,
				Mounts: []httpapi.Mount{
					// Ports by name come first: their paths are the sandbox's.
					{Host: func(h string) bool { return ports.Under(h, domain) }, Handler: http.HandlerFunc(e2bAPI.ServeHost), Public: true},
					// Public: the e2b SDK never sends the API key to envd, only
					// the sandbox's envdAccessToken (X-Access-Token), so the E2B
					// handler checks both itself.
					{Prefix: E2BPrefix + "/", Handler: http.StripPrefix(E2BPrefix, e2bAPI), Public: true},
					// The web console signs browsers in itself; their
					// session then reaches /v1 (Session).
					{Prefix: console.Prefix, Handler: con, Public: true},
				},
				Session: con.Admit,
				Root:    e2bAPI,
				Runner:  rn, RunsDir: a.runsDir(), Getenv: os.Getenv,
				// smolvm branch's runs, which serve only reads.
				Branches: a.newCoordinator(rn, branches),
			})
			// Headers within 10 s (bodies are paced: --body-timeout); a
			// kept-alive connection idle for 2 minutes is closed.
			hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
			scheme := "http"
			if tlsOn {
				scheme = "https"
			}
			where := scheme + "://" + ln.Addr().String()
			if ln.Addr().Network() == "unix" {
				where = "unix://" + ln.Addr().String()
			}
			logger.Info("serving", "at", where, "auth", token != "")
			return srv.Run(ctx, hs, func() error { return hs.Serve(httpapi.Listener(ln, hs.ErrorLog)) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "unix:///path or HOST:PORT (default: unix://<data-dir>/"+SocketName+")")
	f.StringVar(&certFile, "tls-cert", "", "TLS certificate (PEM) for a TCP listener")
	f.StringVar(&keyFile, "tls-key", "", "TLS key (PEM) for a TCP listener")
	f.BoolVar(&insecure, "insecure", false, "allow plain HTTP on a non-loopback address")
	f.BoolVar(&noAuth, "no-auth", false, "serve without a token (Unix socket only)")
	f.StringVar(&maxUpload, "max-upload", "1g", "largest file upload")
	f.StringVar(&domain, "domain", "", "serve sandbox ports at PORT-ID.DOMAIN (E2B's getHost); needs wildcard DNS for *.DOMAIN")
	f.IntVar(&inFlight, "max-in-flight", 128, "requests served at once; more wait in a queue")
	f.IntVar(&queue, "max-queue", 1024, "requests waiting for a slot; more get 429")
	f.IntVar(&perTenant, "max-in-flight-per-tenant", 0, "requests of one tenant (the admin counts as one) served at once, and its share of the queue (default: half of --max-in-flight)")
	f.DurationVar(&bodyTimeout, "body-timeout", httpguard.DefaultBodyTimeout, "a request body must arrive within this, plus 1s per --min-body-rate bytes (else 408)")
	f.StringVar(&bodyRate, "min-body-rate", units.FormatBytes(httpguard.DefaultMinBodyRate), "the slowest a long request body (an upload) may arrive, per second, after --body-timeout")
	f.DurationVar(&defaultTTL, "default-timeout", sandbox.DefaultTTL, "time to live of sandboxes created without one")
	f.DurationVar(&grace, "expired-grace", sandbox.DefaultExpiredGrace, "how long expired sandboxes stay listed")
	cmd.AddCommand(&cobra.Command{
		Use:   "token",
		Short: "Print the API token (generated on first use)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := httpapi.LoadToken(a.dataDir)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, tok)
			return nil
		},
	})
	return cmd
}

// bodyPace checks --body-timeout and --min-body-rate.
func bodyPace(timeout time.Duration, rate string) (httpguard.Pace, error) {
	if timeout <= 0 {
		return httpguard.Pace{}, fmt.Errorf("--body-timeout %s: must be positive", timeout)
	}
	n, err := units.ParseBytes(rate)
	if err != nil || n <= 0 {
		return httpguard.Pace{}, fmt.Errorf("--min-body-rate %q: want a positive size per second (e.g. 16k)", rate)
	}
	return httpguard.Pace{Timeout: timeout, MinRate: n}, nil
}

// listenAPI opens the listener --listen names. TCP off loopback needs TLS
// or an explicit insecure; it reports whether TLS is on.
func listenAPI(addr, certFile, keyFile string, insecure bool) (net.Listener, bool, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if certFile != "" || keyFile != "" {
			return nil, false, errors.New("--tls-cert/--tls-key: not for a Unix socket")
		}
		ln, err := listenUnix(path)
		return ln, false, err
	}
	addr = strings.TrimPrefix(addr, "tcp://")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, fmt.Errorf("--listen %s: want unix:///path or HOST:PORT", addr)
	}
	if (certFile == "") != (keyFile == "") {
		return nil, false, errors.New("--tls-cert and --tls-key go together")
	}
	tlsOn := certFile != ""
	if !tlsOn && !insecure && !isLoopback(host) {
		return nil, false, fmt.Errorf("--listen %s: not a loopback address: give --tls-cert and --tls-key, or --insecure to serve the token in clear", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if tlsOn {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			ln.Close()
			return nil, false, fmt.Errorf("TLS: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	return ln, tlsOn, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// listenUnix listens on path, mode 0600, replacing a stale socket that no
// server answers on but never one in use. Until the chmod the socket has
// the umask's mode, but it sits in the data dir, which is 0700.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: another server is listening there", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
