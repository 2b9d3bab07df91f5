package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
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
