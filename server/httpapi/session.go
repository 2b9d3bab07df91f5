package httpapi

import (
	"net/http"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
)

// authenticate admits r by its API key (Authenticate), or, when it
// carries none, by its browser session (Options.Session), answering 401
// or the session's refusal itself.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if ar, ok := Authenticate(r, s.o.Token, s.tenants()); ok {
		return ar, true
	}
	if len(httpguard.APIKeys(r)) == 0 && s.o.Session != nil {
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
