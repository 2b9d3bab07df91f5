// Package ports forwards HTTP and WebSocket traffic to TCP ports inside
// sandboxes, for smolvm serve's routes by host name and by path.
package ports

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/internal/names"
)

// Dialer connects to port inside the sandbox with ID id.
type Dialer func(ctx context.Context, id string, port int) (net.Conn, error)

// Fail answers a request that could not be forwarded; err is why (the
// dial's error, with its class, or a broken connection).
type Fail func(w http.ResponseWriter, r *http.Request, err error)

// Proxy forwards requests to sandbox ports. Its one Transport keeps idle
// connections per sandbox and port, so steady traffic pays for a dial
// through the agent once, not per request. Ports go through the agent,
// not the network (--net none is the default); kept connections die at a
// checkpoint or fork (the quiesce drops them), and the Transport redials.
type Proxy struct {
	tr *http.Transport
}

// idleTimeout closes a kept connection unused for this long: an open
// connection counts as activity for the sandbox's idle timeout.
const idleTimeout = 30 * time.Second

// New returns a Proxy that reaches ports with dial.
func New(dial Dialer) *Proxy {
	return &Proxy{tr: &http.Transport{
		// The Transport dials "ID:PORT", the host Serve puts in the URL.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			id, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("port %q: %w", p, err)
			}
			return dial(ctx, id, port)
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     idleTimeout,
		// Bodies pass as they are; the sandbox's server chose them.
		DisableCompression: true,
	}}
}

// Close drops the idle connections.
func (p *Proxy) Close() { p.tr.CloseIdleConnections() }

// Serve forwards r to port inside sandbox id, with rawPath (escaped, from
// "/") as its path and r's query. The request keeps its Host, as E2B's
// proxy does, and gains X-Forwarded-*; WebSocket and other upgrades are
// spliced, and responses stream unbuffered.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, id string, port int, rawPath string, fail Fail) {
	rp := &httputil.ReverseProxy{
		Transport:     p.tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort(id, strconv.Itoa(port))
			pr.Out.URL.RawPath = rawPath
			pr.Out.URL.Path, _ = url.PathUnescape(rawPath)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		ErrorHandler: fail,
	}
	// The Transport may still be reading the request body (its last read,
	// the one that sees EOF) when the answer's headers go out: an HTTP/1
	// server then closes the body unless it is full duplex, and the
	// Transport drops the connection mid-answer.
	http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// ParseHost splits a Host header of the form PORT-ID.DOMAIN (what E2B's
// getHost(port) returns) into the sandbox ID and the port. ok is false for
// a host not under domain; err is for one under it that is malformed.
func ParseHost(host, domain string) (id string, port int, ok bool, err error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")
	label, under := strings.CutSuffix(host, "."+domain)
	if domain == "" || !under {
		return "", 0, false, nil
	}
	p, id, found := strings.Cut(label, "-")
	if !found || strings.Contains(label, ".") {
		return "", 0, true, fmt.Errorf("%w: host %q: want PORT-SANDBOXID.%s", names.ErrInvalid, host, domain)
	}
	if err := names.Check(names.Port, p); err != nil {
		return "", 0, true, fmt.Errorf("host %q: %w", host, err)
	}
	if err := names.Check(names.Sandbox, id); err != nil {
		return "", 0, true, fmt.Errorf("host %q: %w", host, err)
	}
	port, _ = strconv.Atoi(p)
	return id, port, true, nil
}

// Under reports whether host is a name under domain (any port aside).
func Under(host, domain string) bool {
	_, _, ok, _ := ParseHost(host, domain)
	return ok
}
