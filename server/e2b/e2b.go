// Package e2b serves E2B's public API (control plane and in-sandbox envd) over smolvm sandboxes, so the official E2B SDKs work unmodified.
package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/ports"
)

// EnvdVersion is the envd version reported for every sandbox. The SDK
// switches behaviour on it: from 0.4.0 it stops sending a default user
// ("user") with every call, from 0.5.2 it offers closeStdin, and from
// 0.5.7 it may upload files as application/octet-stream. 0.6.2 and later
// would ask for file metadata and watch features not served here. Those
// thresholds live in sdk/e2b-compat/node_modules/e2b/dist/index.mjs: read
// them again when the SDK is bumped.
const EnvdVersion = "0.5.7"

// Headers the SDK sends with every envd request. One server serves every
// sandbox's envd and routes by them.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
)

// Runtime is what E2B's API needs of the runtime: sandboxes, their files
// one operation at a time (envd; commands only through Exec), their ports,
// pools to claim from, and whether a snapshot is still in use.
// runtime/manager is one.
type Runtime interface {
	sandbox.Service
	sandbox.Files
	sandbox.Ports
	sandbox.Pools
	sandbox.SnapshotUsers
	sandbox.Templates
	sandbox.VolumeService
	sandbox.VolumeFiles
}

// Options configure a Handler.
type Options struct {
	Manager Runtime
	// State holds E2B's own durable state (metadata, the envd token
	// key): OpenState over the Manager's store, for smolvm serve.
	State State
	// Snapshots, when set, serves E2B's sandbox snapshots (checkpoints).
	Snapshots sandbox.Snapshots
	// Authorize checks the API key of a control-plane request (the SDK
	// sends it as X-API-KEY). envd requests carry no API key: they are
	// checked against the per-sandbox access token handed out at create
	// and connect. It returns the request acting as the key's tenant
	// (httpapi.Authenticate). Required.
	Authorize func(*http.Request) (*http.Request, bool)
	// MaxUpload caps one uploaded file (default 1 GiB); larger uploads get
	// 413 and leave nothing behind.
	MaxUpload int64
	// DefaultTTL is the time to live of a sandbox created without a
	// timeout (the SDK sends none unless timeoutMs is given); 0 is none.
	DefaultTTL time.Duration
	// Where says where the handler is served ("E2B's API is at / and
	// /e2b"), in the answer to a request that no route serves, so that
	// a client with a wrong base URL learns the right one.
	Where string
	// Ports forwards traffic to ports inside sandboxes: requests whose
	// E2b-Sandbox-Port is not envd's, and those ServeHost routes by
	// name. Required.
	Ports *ports.Proxy
	// Domain is the one under which PORT-ID.Domain names a sandbox's
	// port, returned to the SDK at create and connect (getHost(port));
	// empty leaves the SDK's default.
	Domain string
	// Limiter, when set, bounds the requests served at once: control
	// plane and envd requests take a slot once authenticated, of the
	// key's tenant or the sandbox's (httpapi.Options.Limiter shares it).
	// Port traffic takes none, as on the native API.
	Limiter *httpguard.Limiter
	// Builder, when set, serves E2B's template builds (templates.go),
	// whose uploaded files wait in a directory under UploadDir (default:
	// the system's temporary directory).
	Builder   sandbox.Builder
	UploadDir string
	// Images are the builds' bases (required with Builder).
	Images sandbox.Images
	// Envd, when set, serves envd requests once their credentials
	// opened sb, instead of the handler's own envd over Manager: a
	// cluster gateway forwards them to the envd of sb's node.
	Envd func(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox)
}

// Handler serves both E2B APIs: requests with an E2b-Sandbox-Id header
// go to the envd emulation, all others to the control plane. Mount it
// under a prefix with http.StripPrefix and point E2B_API_URL and
// E2B_SANDBOX_URL at that prefix.
type Handler struct {
	m         Runtime
	st        State
	snaps     sandbox.Snapshots
	authorize func(*http.Request) (*http.Request, bool)
	// key derives each sandbox's envd token from its ID (envdToken).
	key       []byte
	maxUpload int64
	ttl       time.Duration
	where     string
	ports     *ports.Proxy
	domain    string
	limit     *httpguard.Limiter
	procs     *procTable
	watches   *watchSet
	kernels   *kernels
	builds    *builds // nil without Options.Builder
	images    sandbox.Images
	envd      func(http.ResponseWriter, *http.Request, *sandbox.Sandbox)
	api       *http.ServeMux
	envdMux   *http.ServeMux
	// routes and envdRoutes list the patterns of each API, for tests.
	routes, envdRoutes []string
}

// New returns a Handler.
func New(ctx context.Context, o Options) (*Handler, error) {
	if o.Manager == nil || o.State == nil {
		return nil, errors.New("e2b: Manager and State are required")
	}
	if o.Authorize == nil || o.Ports == nil {
		return nil, errors.New("e2b: Authorize and Ports are required")
	}
	key, err := o.State.Key(ctx)
	if err != nil {
		return nil, fmt.Errorf("e2b: the envd token key: %w", err)
	}
	h := &Handler{
		m: o.Manager, st: o.State, snaps: o.Snapshots, authorize: o.Authorize, key: key, maxUpload: o.MaxUpload, ttl: o.DefaultTTL, where: o.Where,
		ports: o.Ports, domain: o.Domain, limit: o.Limiter, procs: newProcTable(), watches: newWatchSet(), kernels: newKernels(), images: o.Images, envd: o.Envd,
	}
	if h.maxUpload <= 0 {
		h.maxUpload = 1 << 30
	}
	if o.Builder != nil {
		if o.Images == nil {
			return nil, errors.New("e2b: a Builder needs Images")
		}
		if h.builds, err = newBuilds(o.Builder, o.UploadDir); err != nil {
			return nil, err
		}
	}
	h.api = h.apiRoutes()
	h.envdMux = h.envdServeMux()
	return h, nil
}

// ServeHTTP authenticates a request before anything else, so that a
// caller without credentials learns nothing about routes; then it checks
// the path and the body's size, and routes: requests with an
// E2b-Sandbox-Id header to envd, all others to the control plane. Errors
// take the shape of the API at hand. Whatever the answer, the rest of an
// unread body is drained (bounded), so a client still sending gets the
// answer rather than a reset.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer httpguard.Drain(w, r)
	if id := r.Header.Get(headerSandboxID); id != "" {
		// A valid port but envd's is forwarded; an invalid one is envd's
		// to refuse, in its shape.
		if p := r.Header.Get(headerSandboxPort); p != "" && p != e2bapi.EnvdPort && names.Check(names.Port, p) == nil {
			h.servePort(w, r, id, p)
			return
		}
		h.serveEnvd(w, r, id)
		return
	}
	if id := h.signer(r.Context(), r); id != "" {
		h.serveEnvd(w, r, id) // a signed file URL (signed.go)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/volumecontent/") {
		h.serveVolumeContent(w, r) // takes a volume's token, not an API key
		return
	}
	r, ok := h.authorize(r)
	if !ok {
		writeAPIError(w, http.StatusUnauthorized, "missing or invalid API key (X-API-KEY)")
		return
	}
	if err := httpguard.Path(r); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	release, err := h.acquire(r, tenant.Owner(r.Context()))
	if err != nil {
		httpguard.RefuseBusy(w, err, writeAPIError)
		return
	}
	defer release()
	// A template's upload is a tar, which uploadFiles streams to disk.
	if !isUpload(r) {
		if err := httpguard.Buffer(r, maxRequest); err != nil {
			httpguard.RefuseBody(w, err, writeAPIError)
			return
		}
	}
	if httpguard.Routed(w, r, h.api, h.noRoute(r)) {
		h.api.ServeHTTP(w, r)
	}
}

// acquire takes a slot for r, of class (a tenant, "" the admin), from the
// limiter if there is one.
func (h *Handler) acquire(r *http.Request, class string) (func(), error) {
	if h.limit == nil {
		return func() {}, nil
	}
	return h.limit.Acquire(r.Context(), class)
}

// unrouted answers a request that no control-plane route serves, saying
// where the API is served.
func (h *Handler) unrouted(w http.ResponseWriter, status int, msg string) {
	if h.where != "" {
		msg += "; " + h.where
	}
	writeAPIError(w, status, msg)
}

// checkParams wraps fn with the check of pattern's path parameters, each
// with the names rule of its kind (a bad one is a 400 in fail's shape).
func checkParams(pattern string, fn http.HandlerFunc, fail httpguard.Fail) http.HandlerFunc {
	if err := httpguard.Known(pattern); err != nil {
		panic(err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := httpguard.Params(r, pattern); err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		if httpguard.Bodiless(pattern) {
			if err := httpguard.NoBody(r, pattern); err != nil {
				httpguard.RefuseBody(w, err, fail)
				return
			}
		}
		fn(w, r)
	}
}

// Routes returns the patterns the control plane and envd serve.
func (h *Handler) Routes() (api, envd []string) {
	return append([]string(nil), h.routes...), append([]string(nil), h.envdRoutes...)
}

// Close ends every command the handler started. Commands survive their
// clients, not the server: the agent kills a command whose host
// connection closes.
func (h *Handler) Close() {
	h.procs.killAll()
	h.builds.close()
}

func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func tokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// reply is E2B's answer to an error: the control plane's status, and
// envd's Connect code (whose status envd's HTTP routes answer with).
type reply struct {
	status int
	code   string
}

// classReplies is E2B's answer to each error class.
var classReplies = map[error]reply{
	errdefs.ErrNotFound:      {http.StatusNotFound, codeNotFound},
	errdefs.ErrAlreadyExists: {http.StatusConflict, codeAlreadyExists},
	errdefs.ErrInvalid:       {http.StatusBadRequest, codeInvalidArgument},
	// E2B's envd cannot be reached while its sandbox is not running; the
	// SDK reads unavailable as "the sandbox timed out or was killed".
	errdefs.ErrConflict: {http.StatusConflict, codeUnavailable},
	errdefs.ErrDenied:   {http.StatusForbidden, codePermissionDenied},
	// The SDK reads 429 as E2B's own limits (RateLimitError).
	errdefs.ErrQuota: {http.StatusTooManyRequests, codeResourceExhausted},
	// 502 is what E2B's proxy answers for a sandbox it cannot reach.
	errdefs.ErrUnavailable: {http.StatusBadGateway, codeUnavailable},
	errdefs.ErrCorrupt:     {http.StatusInternalServerError, codeDataLoss},
	errdefs.ErrUnsupported: {http.StatusNotImplemented, codeUnimplemented},
}

// replyOf is E2B's answer to err: by its class; an error already in
// Connect's terms keeps its code, and a context that ended is a timeout.
func replyOf(err error) reply {
	var rerr *rpcError
	r, ok := classReplies[errdefs.Class(err)]
	switch {
	case ok:
		return r
	case errors.As(err, &rerr):
		return reply{rerr.httpStatus(), rerr.Code}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return reply{http.StatusGatewayTimeout, codeDeadlineExceeded}
	}
	return reply{http.StatusInternalServerError, codeInternal}
}

// statusOf is the control plane's status for err.
func statusOf(err error) int { return replyOf(err).status }

// writeErr answers a control-plane request with err.
func writeErr(w http.ResponseWriter, err error) {
	writeAPIError(w, statusOf(err), err.Error())
}

// rpcFrom is envd's Connect error for err.
func rpcFrom(err error) *rpcError {
	var rerr *rpcError
	if errors.As(err, &rerr) {
		return rerr
	}
	return &rpcError{Code: replyOf(err).code, Message: err.Error()}
}

// notLive says why a sandbox E2B cannot use (stopped, created, not yet
// reaped) is not running, and since when.
func notLive(sb *sandbox.Sandbox) string {
	what := string(sb.State)
	if sb.Reason != "" {
		what += " (" + sb.Reason + ")"
	}
	if sb.FinishedAt != nil {
		return fmt.Sprintf("sandbox %q is not running: %s at %s", sb.ID, what, sb.FinishedAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("sandbox %q is not running: %s", sb.ID, what)
}
