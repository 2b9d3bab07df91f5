package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/ports"
)

// headerTrafficToken carries a sandbox's traffic access token to its
// ports (the code interpreter SDK sends it; browsers and curl can too).
const headerTrafficToken = "E2B-Traffic-Access-Token"

// trafficToken is the token that opens a sandbox's ports, and only them:
// derived from the envd token, so it needs no state of its own, and
// handing it out does not hand out envd.
func trafficToken(envdToken string) string {
	mac := hmac.New(sha256.New, []byte(envdToken))
	mac.Write([]byte("smolvm e2b traffic"))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// ServeHost serves a request whose Host is PORT-ID.DOMAIN, E2B's
// getHost(port), by forwarding it whole to that port of that sandbox.
func (h *Handler) ServeHost(w http.ResponseWriter, r *http.Request) {
	id, port, _, err := ports.ParseHost(r.Host, h.domain)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	h.servePort(w, r, id, strconv.Itoa(port))
}

// servePort forwards r to port p of sandbox id. Any one of the sandbox's
// traffic token, its envd token (X-Access-Token) or the API key opens it
// (access); none of them is passed on. Errors are E2B's proxy's: 502
// for a sandbox not running or a port nothing listens on.
func (h *Handler) servePort(w http.ResponseWriter, r *http.Request, id, p string) {
	r, sb, err := h.access(r, id, r.Header.Values(headerAccessToken), r.Header.Values(headerTrafficToken))
	if errors.Is(err, errNoAccess) {
		writeAPIError(w, http.StatusUnauthorized, fmt.Sprintf("missing or invalid access token: send %s (trafficAccessToken), %s or the API key", headerTrafficToken, headerAccessToken))
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := names.Check(names.Port, p); err != nil {
		writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("%s: %v", headerSandboxPort, err))
		return
	}
	port, _ := strconv.Atoi(p)
	if sb.State != sandbox.StateRunning {
		writeAPIError(w, http.StatusBadGateway, notLive(sb))
		return
	}
	// The sandbox's server gets none of the credentials that opened it;
	// any API key left was checked (access refuses a wrong one).
	r.Header.Del(headerTrafficToken)
	r.Header.Del(headerAccessToken)
	if len(httpguard.APIKeys(r)) > 0 {
		r.Header.Del("Authorization")
		r.Header.Del("X-API-KEY")
	}
	fail := portFailed(sb.ID, port)
	if port == kernelPort {
		// The code interpreter, in a sandbox of any template: started
		// if nothing listens, and checked again after a failure.
		if err := h.kernels.ensure(r.Context(), h, sb.ID); err != nil {
			fail(w, r, err)
			return
		}
		fail = func(w http.ResponseWriter, r *http.Request, err error) {
			h.kernels.forget(sb.ID)
			portFailed(sb.ID, port)(w, r, err)
		}
	}
	h.ports.Serve(w, r, sb.ID, port, r.URL.EscapedPath(), fail)
}

// portFailed answers a request that did not reach its port as E2B's
// proxy does: 502, the sandbox being unreachable, unless the error says
// otherwise (a bad port, a sandbox gone).
func portFailed(id string, port int) ports.Fail {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		status := statusOf(err)
		if c := errdefs.Class(err); c == nil || errors.Is(err, errdefs.ErrConflict) {
			status = http.StatusBadGateway
		}
		writeAPIError(w, status, fmt.Sprintf("sandbox %q, port %d: %v", id, port, err))
	}
}
