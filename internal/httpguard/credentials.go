package httpguard

import (
	"net/http"
	"strings"
)

// APIKeys returns every API key r carries: each "Authorization: Bearer
// KEY" and each "X-API-KEY: KEY" (what E2B's clients send), every copy of
// either header. Another Authorization scheme is no API key: the e2b SDK
// names envd's user in Basic, and a sandbox's own server may use it.
func APIKeys(r *http.Request) []string {
	keys := append([]string(nil), r.Header.Values("X-API-KEY")...)
	for _, h := range r.Header.Values("Authorization") {
		scheme, rest, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			keys = append(keys, strings.TrimSpace(rest))
		}
	}
	return keys
}

// APIKey returns the one API key r carries, "" for none. ok is false when
// it carries several that differ (one tenant's key beside another's, a
// valid key beside a wrong one): such a request names two principals, and
// is refused rather than served as whichever was read first.
func APIKey(r *http.Request) (key string, ok bool) {
	keys := APIKeys(r)
	for _, k := range keys {
		if k != keys[0] {
			return "", false
		}
	}
	if len(keys) == 0 {
		return "", true
	}
	return keys[0], true
}
