package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/splice"
	"smolvm.dev/smolvm/sandbox"
)

// portRoute is the path form of a sandbox's port, for clients without
// wildcard DNS: everything after it is the path the port's server sees.
const portRoute = "/v1/sandboxes/{id}/ports/{port}/"

// portMethods are the methods the port route forwards (GET covers HEAD).
var portMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// registerPortRoutes registers the port route for each method, since
// openapi.json needs METHOD /path patterns (E2B's Host form and its
// E2b-Sandbox-Port header check no path at all). It is not
// limited (a WebSocket may stay open for hours), and its path below the
// port may have empty segments (httpguard.ForwardedPath).
func (s *Server) registerPortRoutes() {
	for _, m := range portMethods {
		pattern := m + " " + portRoute
		s.proxied[pattern] = true
		s.handle(pattern, true, false, body{}, http.HandlerFunc(s.port))
	}
	s.handle(tunnelRoute, true, false, body{none: true}, http.HandlerFunc(s.tunnel))
}

// tunnelRoute is a port's raw byte stream, for a runtime elsewhere whose
// DialPort reaches ports through this server (the cluster gateway's, at
// the node's serve): the request upgrades to api.TunnelProtocol, and the
// connection then carries the port's bytes both ways.
const tunnelRoute = "GET /v1/sandboxes/{id}/tunnel/{port}"

// tunnel splices the connection to a port inside the sandbox, through
// the runtime's DialPort. It is not limited, as the port route is not.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	if !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), api.TunnelProtocol) {
		writeError(w, invalid("", "a tunnel upgrades: send Connection: Upgrade and Upgrade: "+api.TunnelProtocol))
		return
	}
	port, _ := strconv.Atoi(r.PathValue("port"))
	pc, err := s.o.Manager.DialPort(r.Context(), r.PathValue("id"), port)
	if err != nil {
		writeError(w, fmt.Errorf("sandbox %q, port %d: %w", r.PathValue("id"), port, err))
		return
	}
	defer pc.Close()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, fmt.Errorf("tunnel: %w", err))
		return
	}
	defer nc.Close()
	if _, err := fmt.Fprintf(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", api.TunnelProtocol); err != nil {
		return
	}
	// brw may hold bytes the client sent right after its request.
	splice.Conns(nc, brw.Reader, pc)
}

// port forwards a request to a port inside a sandbox. The API token that
// opened it is not passed on.
func (s *Server) port(w http.ResponseWriter, r *http.Request) {
	if s.o.Ports == nil {
		writeError(w, errdefs.New(errdefs.ErrUnsupported, "this server forwards no ports"))
		return
	}
	sb, err := s.o.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if sb.State != sandbox.StateRunning {
		writeError(w, &api.Error{Status: http.StatusBadGateway, Code: api.CodeUnavailable, Message: fmt.Sprintf("sandbox %q is %s", sb.Name, sb.State)})
		return
	}
	port, _ := strconv.Atoi(r.PathValue("port"))
	// The rest of the escaped path, from the "/" after the port: the
	// route's five segments hold no escaped slash, whatever they decode to.
	rest := r.URL.EscapedPath()
	for range 5 {
		rest = rest[1+strings.IndexByte(rest[1:], '/'):]
	}
	r.Header.Del("Authorization")
	r.Header.Del("X-API-KEY")
	s.o.Ports.Serve(w, r, sb.ID, port, rest, func(w http.ResponseWriter, r *http.Request, err error) {
		e := errorFor(fmt.Errorf("sandbox %q, port %d: %w", sb.Name, port, err))
		// What is not the caller's fault is the sandbox's server's: 502.
		if errdefs.Class(err) == nil || errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrConflict) {
			e.Status, e.Code = http.StatusBadGateway, api.CodeUnavailable
		}
		writeJSON(w, e.Status, e)
	})
}
