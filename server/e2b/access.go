package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Who reaches a sandbox's envd and ports. The SDK sends envd no API key,
// only the sandbox's access token; ports take the sandbox's traffic
// token, its envd token or the API key. A sandbox's tokens are checked
// against the exact ID the request names before anything is looked up,
// and every request whose credentials do not open what it names gets one
// answer per route: the same for a sandbox that runs, is another
// tenant's or a pool's, was removed, or never existed, naming nothing the
// caller did not send. Looking the sandbox up first told a caller with no
// key which IDs, prefixes and names exist, their full IDs and when they
// were removed (SECURITY.md).

// errNoAccess is a request whose credentials do not open the sandbox it
// names, whatever that names.
var errNoAccess = errors.New("credentials do not open the sandbox")

// envdToken is the envd access token of the sandbox whose full ID is id:
// an HMAC of the ID. A request's token is thus checked against the ID it
// names by computation alone, before anything is looked up, and still
// opens a sandbox that is gone, so that its holder learns that (the SDK's
// isRunning reads envd's 502 after a kill as false; an auth error would
// throw). Tokens an older smolvm made at random stop working: connect
// hands out the new one.
func (h *Handler) envdToken(id string) string { return envdToken(h.key, id) }

func envdToken(key []byte, id string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// tokenSandbox returns the sandbox whose full ID is id for a request that
// sent its tokens: at least one, each of envd its envd token and each of
// traffic its traffic token; otherwise errNoAccess. Only then is it
// looked up, and by the exact ID: never a name or a prefix, which could
// reach another sandbox with one sandbox's token. The request then acts
// as the sandbox's tenant. An ID no sandbox could have is refused as
// such, which tells nothing of any sandbox.
func (h *Handler) tokenSandbox(r *http.Request, id string, envd, traffic []string) (*http.Request, *sandbox.Sandbox, error) {
	if len(envd)+len(traffic) == 0 {
		return r, nil, errNoAccess
	}
	if err := names.Check(names.Sandbox, id); err != nil {
		return r, nil, fmt.Errorf("%s: %w", headerSandboxID, err)
	}
	tok := h.envdToken(id)
	if !all(envd, tok) || !all(traffic, trafficToken(tok)) {
		return r, nil, errNoAccess
	}
	sb, err := h.m.Get(r.Context(), id)
	if err == nil && sb.ID != id {
		// Its sandbox is gone, and another is named like its ID.
		err = fmt.Errorf("%w: %q is gone", sandbox.ErrNotFound, id)
	}
	if err != nil {
		return r, nil, err
	}
	return r.WithContext(tenant.With(r.Context(), sb.Tenant)), sb, nil
}

// all reports whether each of sent is tok; each is compared in constant
// time.
func all(sent []string, tok string) bool {
	ok := true
	for _, s := range sent {
		ok = tokenEqual(s, tok) && ok
	}
	return ok
}

// access returns the sandbox r asks for, by its envd and traffic tokens
// or the API key. The key opens any sandbox of its tenant (r then acts
// as the tenant; another's answers as a missing one), by name and prefix
// too, as on the API; the sandbox's own tokens open it alone
// (tokenSandbox). Every credential sent must hold, for one principal: a
// key that does not is errNoAccess whatever else r carries, and so are
// tokens sent with a key whose tenant does not own their sandbox. The
// e2b SDK sends envd no key; a cluster gateway does, forwarding envd
// traffic to a node (Options.Envd).
func (h *Handler) access(r *http.Request, id string, envd, traffic []string) (*http.Request, *sandbox.Sandbox, error) {
	// Without a key authorize fails, unless auth is off: then everyone
	// is the admin.
	kr, keyed := h.authorize(r)
	switch {
	case !keyed && len(httpguard.APIKeys(r)) > 0:
		return r, nil, errNoAccess
	case !keyed:
		return h.tokenSandbox(r, id, envd, traffic)
	case len(envd)+len(traffic) == 0:
		sb, err := h.m.Get(kr.Context(), id)
		return kr, sb, err
	}
	_, sb, err := h.tokenSandbox(r, id, envd, traffic)
	if err == nil && !tenant.Owns(kr.Context(), sb.Tenant) {
		err = errNoAccess
	}
	return kr, sb, err
}
