// Package client is the Go SDK for smolvm's HTTP API; the CLI uses it
// when SMOLVM_HOST points at a server.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// Errors an API call's error matches with errors.Is.
var (
	ErrNotFound     = sandbox.ErrNotFound // never existed, or removed
	ErrExpired      = sandbox.ErrExpired  // expired (an *Error says when)
	ErrUnauthorized = errors.New("unauthorized")
	ErrTimeout      = errors.New("timed out")
	ErrBusy         = errors.New("server busy")
	ErrTooLarge     = errors.New("too large")
)

// Error is an error response from the server. Its message is the server's
// own, so it reads like the same failure without a server.
type Error struct {
	Status int
	// Code is one of api's Code constants; Field names the request field
	// a 400 is about; ExpiredAt is when an expired sandbox expired.
	Code, Message, Field string
	ExpiredAt            *time.Time
	// Exit is why a sandbox's main command could not start.
	Exit *sandbox.Exit
	// class is the error's errdefs class, nil for none.
	class error
}

// As makes errors.As find a *sandbox.StartError in a "cannot_start"
// error, as a direct caller of the Manager would.
func (e *Error) As(target any) bool {
	if se, ok := target.(**sandbox.StartError); ok && e.Exit != nil {
		*se = &sandbox.StartError{Exit: *e.Exit}
		return true
	}
	return false
}

func (e *Error) Error() string { return e.Message }

// codeErrors gives each code the error it stands for: the package's own,
// or the sentinel a direct caller of the Manager would see.
var codeErrors = map[string]error{
	api.CodeNotFound:     ErrNotFound,
	api.CodeExpired:      ErrExpired,
	api.CodeUnauthorized: ErrUnauthorized,
	api.CodeTimeout:      ErrTimeout,
	api.CodeBusy:         ErrBusy,
	api.CodeTooLarge:     ErrTooLarge,
	api.CodeDenied:       errdefs.ErrDenied,
	api.CodeInvalid:      sandbox.ErrInvalid,
	api.CodeConflict:     sandbox.ErrState,
}

// Is matches the error its code stands for and its class, so that
// errors.Is(err, sandbox.ErrNotFound) and errors.Is(err,
// errdefs.ErrNotFound) hold remotely as they do locally.
func (e *Error) Is(target error) bool {
	return target == codeErrors[e.Code] || (e.class != nil && target == e.class)
}

// Client talks to one smolvm server. It is safe for concurrent use.
type Client struct {
	base  string // "http://host:port" or "http://unix" for a socket
	token string
	// tenant, set by As, is the tenant an admin token acts as.
	tenant string
	hc     *http.Client
}

// New returns a client for host: "unix:///path/to/smolvm.sock",
// "http://host:port" or "https://host:port".
func New(host, token string) (*Client, error) {
	c := &Client{token: token}
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		if path == "" {
			return nil, fmt.Errorf("SMOLVM_HOST %q: no socket path", host)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.base, c.hc = "http://unix", &http.Client{Transport: tr}
		return c, nil
	}
	u, err := url.Parse(host)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("SMOLVM_HOST %q: want unix:///path, http://host:port or https://host:port", host)
	}
	c.base, c.hc = strings.TrimRight(host, "/"), &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	return c, nil
}

// As returns a client acting, with c's admin token, as tenant (which
// must exist on the server): what it makes is the tenant's, and it sees
// only the tenant's objects. It shares c's connections.
func (c *Client) As(tenant string) *Client {
	cp := *c
	cp.tenant = tenant
	return &cp
}

// FromEnv returns a client for $SMOLVM_HOST with $SMOLVM_TOKEN, or nil
// when SMOLVM_HOST is unset.
func FromEnv() (*Client, error) {
	host := os.Getenv("SMOLVM_HOST")
	if host == "" {
		return nil, nil
	}
	return New(host, os.Getenv("SMOLVM_TOKEN"))
}

// auth sets h's credentials.
func (c *Client) auth(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.tenant != "" {
		h.Set(api.HeaderTenant, c.tenant)
	}
}

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         io.Reader
	contentType  string
	accept       string
	// upgrade, when set, asks to switch the connection to that protocol.
	upgrade string
}

// do sends req and returns the response if its status is 2xx; otherwise
// the error it carries.
func (c *Client) do(ctx context.Context, req request) (*http.Response, error) {
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, req.body)
	if err != nil {
		return nil, err
	}
	c.auth(hr.Header)
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if req.accept != "" {
		hr.Header.Set("Accept", req.accept)
	}
	if req.upgrade != "" {
		hr.Header.Set("Connection", "Upgrade")
		hr.Header.Set("Upgrade", req.upgrade)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		return nil, fmt.Errorf("smolvm server: %w", err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

func readError(resp *http.Response) error {
	var body api.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &body) != nil || body.Message == "" {
		return &Error{Status: resp.StatusCode, Message: fmt.Sprintf("smolvm server: %s: %s", resp.Status, bytes.TrimSpace(b))}
	}
	return fromAPI(resp.StatusCode, &body)
}

func fromAPI(status int, e *api.Error) *Error {
	return &Error{Status: status, Code: e.Code, Message: e.Message, Field: e.Field, ExpiredAt: e.ExpiredAt, Exit: e.Exit, class: errdefs.Parse(e.Class)}
}

// call sends a JSON body (nil for none) and decodes a JSON reply into out
// (nil to discard it).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	req := request{method: method, path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.body, req.contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("smolvm server: bad reply to %s %s: %w", method, path, err)
	}
	return nil
}

func sbPath(ref string, rest ...string) string {
	return "/v1/sandboxes/" + url.PathEscape(ref) + strings.Join(rest, "")
}

// Create makes a sandbox (and starts it if o.Start). o.Config.TTL is sent
// as given: 0 means no time to live, as it does for the Manager.
func (c *Client) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	cfg := o.Config
	ttl := api.Duration(cfg.TTL)
	req := api.CreateRequest{
		Name: o.Name, Image: o.Image, Cmd: cfg.Cmd, Env: cfg.Env, WorkDir: cfg.WorkDir, User: cfg.User,
		Hostname: cfg.Hostname, CPUs: cfg.Limits.CPUs, Memory: api.Bytes(cfg.Limits.Memory), Pids: cfg.Limits.Pids,
		Disk: api.Bytes(cfg.Limits.Disk), Timeout: &ttl, IdleTimeout: api.Duration(cfg.IdleTimeout),
		OnExpiry: cfg.OnExpiry, TrustRepo: cfg.TrustRepo, Network: cfg.Network, Labels: cfg.Labels, Volumes: cfg.Volumes, Start: &o.Start, Pool: o.Pool, Backend: o.Backend,
	}
	return c.sandboxCall(ctx, http.MethodPost, "/v1/sandboxes", req)
}

// List returns every sandbox, expired ones included.
func (c *Client) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	var sbs []*sandbox.Sandbox
	return sbs, c.call(ctx, http.MethodGet, "/v1/sandboxes", nil, &sbs)
}

// Get returns one sandbox; an expired one is an *Error matching ErrExpired.
func (c *Client) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodGet, sbPath(ref), nil)
}

// callFor is call for a reply of type T, which is nil on error.
func callFor[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	var v T
	if err := c.call(ctx, method, path, in, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c *Client) sandboxCall(ctx context.Context, method, path string, in any) (*sandbox.Sandbox, error) {
	return callFor[sandbox.Sandbox](ctx, c, method, path, in)
}

// Start starts a created, stopped or expired sandbox.
func (c *Client) Start(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, sbPath(ref, "/start"), nil)
}

// Stop stops a sandbox, with SIGKILL after grace.
func (c *Client) Stop(ctx context.Context, ref string, grace time.Duration) (*sandbox.Sandbox, error) {
	d := api.Duration(grace)
	return c.sandboxCall(ctx, http.MethodPost, sbPath(ref, "/stop"), api.StopRequest{Timeout: &d})
}

// Remove deletes a sandbox; a running one needs force (kill).
func (c *Client) Remove(ctx context.Context, ref string, force bool) error {
	resp, err := c.do(ctx, request{method: http.MethodDelete, path: sbPath(ref), query: url.Values{"force": {strconv.FormatBool(force)}}})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// SetTTL sets the time to live to ttl from now; 0 removes it.
func (c *Client) SetTTL(ctx context.Context, ref string, ttl time.Duration) (*sandbox.Sandbox, error) {
	d := api.Duration(ttl)
	return c.sandboxCall(ctx, http.MethodPost, sbPath(ref, "/timeout"), api.TimeoutRequest{Timeout: &d})
}

// Stats returns live resource usage.
func (c *Client) Stats(ctx context.Context, ref string) (*sandbox.Stats, error) {
	return callFor[sandbox.Stats](ctx, c, http.MethodGet, sbPath(ref, "/stats"), nil)
}

// NetStatus reports a sandbox's network: policy, addresses, published
// ports as bound, byte counters.
func (c *Client) NetStatus(ctx context.Context, ref string) (*sandbox.NetworkState, error) {
	return callFor[sandbox.NetworkState](ctx, c, http.MethodGet, sbPath(ref, "/network"), nil)
}

// NetEvents returns a sandbox's deny log, oldest first.
func (c *Client) NetEvents(ctx context.Context, ref string) ([]sandbox.NetworkEvent, error) {
	var evs []sandbox.NetworkEvent
	return evs, c.call(ctx, http.MethodGet, sbPath(ref, "/network/events"), nil, &evs)
}

// NetUpdate replaces a running sandbox's policy (published ports stay).
func (c *Client) NetUpdate(ctx context.Context, ref string, p sandbox.Network) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPut, sbPath(ref, "/network"), api.NetworkUpdateRequest{Mode: p.Mode, Hosts: p.Hosts, CIDRs: p.CIDRs})
}

// Images lists the server's images.
func (c *Client) Images(ctx context.Context) ([]sandbox.Image, error) {
	var imgs []sandbox.Image
	return imgs, c.call(ctx, http.MethodGet, "/v1/images", nil, &imgs)
}

// PullImage makes sure the server has an image, pulling it from its
// registry when it has not (admin token only).
func (c *Client) PullImage(ctx context.Context, req api.PullRequest) (*sandbox.Image, error) {
	return callFor[sandbox.Image](ctx, c, http.MethodPost, "/v1/images", req)
}

// Checkpoint saves a running sandbox as a snapshot.
func (c *Client) Checkpoint(ctx context.Context, ref string, o sandbox.CheckpointOptions) (*sandbox.Snapshot, error) {
	return callFor[sandbox.Snapshot](ctx, c, http.MethodPost, sbPath(ref, "/checkpoint"), api.CheckpointRequest{Name: o.Name, Stop: o.Stop})
}

// Restore starts a new sandbox from a snapshot.
func (c *Client) Restore(ctx context.Context, snap string, o sandbox.RestoreOptions) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(snap)+"/restore", api.RestoreRequest{Name: o.Name, TTL: api.Duration(o.TTL), Labels: o.Labels})
}

// Fork makes running copies of a running sandbox.
func (c *Client) Fork(ctx context.Context, ref string, o sandbox.ForkOptions) ([]*sandbox.Sandbox, error) {
	var sbs []*sandbox.Sandbox
	return sbs, c.call(ctx, http.MethodPost, sbPath(ref, "/fork"), api.ForkRequest{N: &o.N, NamePrefix: o.NamePrefix}, &sbs)
}

// Pause freezes a running sandbox.
func (c *Client) Pause(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, sbPath(ref, "/pause"), nil)
}

// Resume thaws a paused sandbox.
func (c *Client) Resume(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, sbPath(ref, "/resume"), nil)
}

// CreatePool records a pool, and fills it first if req.Fill.
func (c *Client) CreatePool(ctx context.Context, req api.PoolRequest) (*sandbox.Pool, error) {
	return callFor[sandbox.Pool](ctx, c, http.MethodPost, "/v1/pools", req)
}

// Pools lists pools with how many sandboxes wait in each.
func (c *Client) Pools(ctx context.Context) ([]*sandbox.Pool, error) {
	var pools []*sandbox.Pool
	return pools, c.call(ctx, http.MethodGet, "/v1/pools", nil, &pools)
}

// FillPool starts sandboxes until the pool is full (or its memory budget is).
func (c *Client) FillPool(ctx context.Context, name string) (*sandbox.Pool, error) {
	return callFor[sandbox.Pool](ctx, c, http.MethodPost, "/v1/pools/"+url.PathEscape(name)+"/fill", nil)
}

// RemovePool removes a pool and the sandboxes waiting in it.
func (c *Client) RemovePool(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/pools/"+url.PathEscape(name), nil, nil)
}

// CreateTenant adds a tenant (admin only).
func (c *Client) CreateTenant(ctx context.Context, req api.TenantRequest) (*sandbox.Tenant, error) {
	return callFor[sandbox.Tenant](ctx, c, http.MethodPost, "/v1/tenants", req)
}

// Snapshots lists stored snapshots.
func (c *Client) Snapshots(ctx context.Context) ([]sandbox.Snapshot, error) {
	var snaps []sandbox.Snapshot
	return snaps, c.call(ctx, http.MethodGet, "/v1/snapshots", nil, &snaps)
}

// RemoveSnapshot deletes a snapshot no sandbox depends on.
func (c *Client) RemoveSnapshot(ctx context.Context, ref string) error {
	return c.call(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(ref), nil, nil)
}

// ExportSnapshot streams snapshot ref as a tar archive, for
// ImportSnapshot on another server; the caller closes it. A snapshot not
// sealed yet is a conflict: retry.
func (c *Client) ExportSnapshot(ctx context.Context, ref string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshots/" + url.PathEscape(ref) + "/export"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ImportSnapshot stores the snapshot an export streams, under its own ID
// and named name ("" for none); copied is false when the server held it already (and read only its
// record). A damaged stream is errdefs.ErrCorrupt and leaves nothing.
func (c *Client) ImportSnapshot(ctx context.Context, r io.Reader, name string) (snap *sandbox.Snapshot, copied bool, err error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/snapshots/import", query: q, body: r, contentType: "application/x-tar"})
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		return nil, false, fmt.Errorf("smolvm server: bad reply to a snapshot import: %w", err)
	}
	return snap, resp.StatusCode == http.StatusCreated, nil
}

// Events calls fn for every lifecycle event until ctx ends or fn fails.
func (c *Client) Events(ctx context.Context, fn func(sandbox.Event) error) error {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/events"})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return eachLine(resp.Body, func(line []byte) error {
		var e sandbox.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("smolvm server: bad event: %w", err)
		}
		return fn(e)
	})
}

// eachLine calls fn for every non-empty line of an NDJSON stream.
func eachLine(r io.Reader, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

var _ sandbox.Service = (*Client)(nil)
