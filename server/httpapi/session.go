package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
)

// authenticate admits r, for the route of pattern, by its API key
// (Authenticate), or, when it carries none, by its browser session
// (Options.Session), answering 401 or the session's refusal itself. A
// session never opens a route forwarded to a sandbox (its ports): the
// sandbox's pages would run on the console's origin, and its server
// would get the session's cookie.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, bool) {
	if ar, ok := Authenticate(r, s.o.Token, s.tenants()); ok {
		return ar, true
	}
	if len(httpguard.APIKeys(r)) == 0 && s.o.Session != nil && !s.proxied[pattern] {
		sr, ok, err := s.o.Session(r)
		if err != nil {
			writeError(w, err)
			return r, false
		}
		if ok {
			return sr, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="smolvm"`)
	writeError(w, &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "missing or wrong API token (Authorization: Bearer … or X-API-KEY), or the admin's naming a tenant that does not exist (" + api.HeaderTenant + ")"})
	return r, false
}
