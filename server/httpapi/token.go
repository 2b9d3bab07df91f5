package httpapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// TokenFile is the token's file name in the data dir.
const TokenFile = "api-token"

// LoadToken returns the API token stored in dataDir, generating it on
// first use. The file is 0600; one readable by others is refused, since
// the token would no longer be a secret.
func LoadToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, TokenFile)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			fi, err := os.Stat(path)
			if err != nil {
				return "", err
			}
			if fi.Mode().Perm()&0o077 != 0 {
				return "", fmt.Errorf("API token %s has mode %v: others can read it; chmod 600 it or remove it for a new one", path, fi.Mode().Perm())
			}
			tok := strings.TrimSpace(string(b))
			if tok == "" {
				return "", fmt.Errorf("API token %s is empty: remove it for a new one", path)
			}
			return tok, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("API token: %w", err)
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return "", err
		}
		var raw [32]byte
		rand.Read(raw[:])
		// Write a temp file and link it into place: a concurrent first
		// start either wins or reads the winner's token, never half of one.
		tmp, err := os.CreateTemp(dataDir, TokenFile+".*")
		if err != nil {
			return "", err
		}
		_, werr := tmp.WriteString(hex.EncodeToString(raw[:]) + "\n")
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return "", err
		}
		lerr := os.Link(tmp.Name(), path)
		os.Remove(tmp.Name())
		if lerr != nil && !errors.Is(lerr, fs.ErrExist) {
			return "", fmt.Errorf("API token: %w", lerr)
		}
	}
}

// CheckToken reports whether r carries token, as "Authorization: Bearer
// <token>" or as "X-API-KEY: <token>" (what E2B clients send), and no
// other key beside it (httpguard.APIKey). The comparison takes the same
// time wherever a wrong token differs. An empty token means auth is off.
func CheckToken(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	key, ok := httpguard.APIKey(r)
	return ok && subtle.ConstantTimeCompare([]byte(key), []byte(token)) == 1
}

// Authenticate returns r acting as whoever its key names: unchanged for
// the server's token (the admin, who sees everything), scoped to the
// tenant for one of tenants' keys (runtime/tenant), which the runtime then
// holds to that tenant's objects. False: no valid key, or several keys
// that differ (httpguard.APIKey), which name no one principal. Keys are
// looked up at every request, so a revoked one fails at once. With auth
// off (empty token) every request is the admin's.
//
// The admin may act as a tenant that exists, named in api.HeaderTenant.
func Authenticate(r *http.Request, token string, tenants sandbox.Tenants) (*http.Request, bool) {
	if CheckToken(r, token) {
		name := r.Header.Get(api.HeaderTenant)
		if name == "" {
			return r, true
		}
		if tenants == nil {
			return r, false
		}
		if _, err := tenants.Get(r.Context(), name); err != nil {
			return r, false
		}
		return r.WithContext(tenant.With(r.Context(), name)), true
	}
	key, ok := httpguard.APIKey(r)
	if !ok || tenants == nil {
		return r, false
	}
	name, ok := tenants.Resolve(r.Context(), key)
	if !ok {
		return r, false
	}
	return r.WithContext(tenant.With(r.Context(), name)), true
}
