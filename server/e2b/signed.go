package e2b

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signed file URLs: the SDK's downloadUrl and uploadUrl put no token in a
// header (a browser will fetch them), but sign the file's path, the
// operation and the user with the sandbox's envd token, as envd checks:
//
//	"v1_" + base64(sha256(path:operation:user:token[:expiration])), unpadded
//
// and an expiration, when given, is a Unix time after which the URL is
// refused. A valid signature is as good as the token for that one file.
// With E2B_SANDBOX_URL set the SDK's URL names no sandbox (it is
// E2B_SANDBOX_URL's origin + /files); the signature then finds it, since
// only the sandbox whose token signed it verifies it.

// signedOp is the operation a /files request needs signed.
func signedOp(r *http.Request) string {
	switch {
	case r.URL.Path != "/files":
		return ""
	case r.Method == http.MethodGet:
		return "read"
	case r.Method == http.MethodPost:
		return "write"
	}
	return ""
}

// signedBy reports whether r is a signed /files request signed with
// sandbox id's token, and not expired.
func (h *Handler) signedBy(r *http.Request, id string) bool {
	op, q := signedOp(r), r.URL.Query()
	sig := q.Get("signature")
	if op == "" || !strings.HasPrefix(sig, "v1_") {
		return false
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + h.envdToken(id)
	if exp := q.Get("signature_expiration"); exp != "" {
		at, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > at {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return tokenEqual(sig, "v1_"+strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "="))
}

// signer returns the ID of the sandbox whose token signed r, a /files
// request that names no sandbox; "" if none did. Every live sandbox is
// tried, whatever its tenant: the signature is the credential.
func (h *Handler) signer(ctx context.Context, r *http.Request) string {
	if signedOp(r) == "" || r.URL.Query().Get("signature") == "" {
		return ""
	}
	sbs, err := h.m.List(ctx)
	if err != nil {
		return ""
	}
	for _, sb := range sbs {
		if h.signedBy(r, sb.ID) {
			return sb.ID
		}
	}
	return ""
}
