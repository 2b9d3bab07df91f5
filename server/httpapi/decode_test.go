package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"smolvm.dev/smolvm/api"
)

// These tests need no sandbox: every request here is refused before the
// Manager is consulted, so the server runs without one.

func call(t *testing.T, s http.Handler, method, path, body string, hdr map[string]string) (*httptest.ResponseRecorder, api.Error) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var e api.Error
	if w.Code >= 400 && w.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Fatalf("%s %s: status %d with a body that is not a JSON error: %q", method, path, w.Code, w.Body)
		}
	}
	return w, e
}

var auth = map[string]string{"Authorization": "Bearer t0ken"}

func TestBadRequestsNameTheField(t *testing.T) {
	s := New(Options{Token: "t0ken"})
	for _, c := range []struct {
		path, body, field, msg string
	}{
		{"/v1/sandboxes", `{"name": 5}`, "name", `want a string, got number`},
		{"/v1/sandboxes", `{"memory": "lots"}`, "memory", `want a size`},
		{"/v1/sandboxes", `{"timeout": "soon"}`, "timeout", `want a duration`},
		{"/v1/sandboxes", `{"timeout": -3}`, "timeout", `want a duration`},
		{"/v1/sandboxes", `{"cmd": "ls"}`, "cmd", `want an array`},
		{"/v1/sandboxes", `{"nmae": "x"}`, "nmae", `unknown field`},
		{"/v1/sandboxes", `{"env": ["NOEQUALS"]}`, "env", `want KEY=VALUE`},
		{"/v1/sandboxes", `{"name": "x"`, "", `truncated JSON`},
		{"/v1/sandboxes", `{"name": x}`, "", `malformed JSON at byte`},
		{"/v1/sandboxes", `[]`, "", `want a JSON object`},
		{"/v1/sandboxes", ``, "", `empty`},
		{"/v1/sandboxes", `{} {}`, "", `unexpected data after`},
		{"/v1/sandboxes/x/exec", `{"args": []}`, "args", `required`},
		{"/v1/sandboxes/x/exec", `{"args": ["ls"], "tty": true}`, "tty", `WebSocket`},
		{"/v1/sandboxes/x/exec", `{"args": ["ls"], "timeout": {}}`, "timeout", `want a duration`},
		{"/v1/sandboxes/x/timeout", `{}`, "timeout", `required`},
		{"/v1/sandboxes/x/stop", `{"timeout": true}`, "timeout", `want a duration`},
		{"/v1/sandboxes/x/fork", `{"n": "two"}`, "n", `want a number`},
		{"/v1/tenants", `{"name": "a", "name": "b"}`, "name", `"name": given twice`},
		{"/v1/tenants", `{"name": "a", "Name": "b"}`, "Name", `"Name": given twice`},
		{"/v1/sandboxes", `{"labels": {"k": "1", "k": "2"}}`, "labels.k", `"labels.k": given twice`},
		{"/v1/sandboxes", `{"network": {"mode": "none", "MODE": "open"}}`, "network.MODE", `given twice`},
	} {
		w, e := call(t, s, http.MethodPost, c.path, c.body, auth)
		if w.Code != http.StatusBadRequest || e.Code != api.CodeInvalid || e.Field != c.field || !strings.Contains(e.Message, c.msg) {
			t.Errorf("POST %s %s: %d %+v, want 400 naming field %q with %q", c.path, c.body, w.Code, e, c.field, c.msg)
		}
	}
	for _, c := range []struct{ method, path, field string }{
		{http.MethodPut, "/v1/sandboxes/x/files?path=../../etc/passwd", "path"},
		{http.MethodPut, "/v1/sandboxes/x/files?path=/tmp/../../etc/passwd", "path"},
		{http.MethodGet, "/v1/sandboxes/x/files?path=etc/passwd", "path"},
		{http.MethodGet, "/v1/sandboxes/x/files", "path"},
		{http.MethodGet, "/v1/sandboxes/x/files?path=/a&format=zip", "format"},
		{http.MethodDelete, "/v1/sandboxes/x?force=maybe", "force"},
		{http.MethodGet, "/v1/sandboxes/x/logs?follow=2", "follow"},
	} {
		w, e := call(t, s, c.method, c.path, "", auth)
		if w.Code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("%s %s: %d %+v, want 400 naming %q", c.method, c.path, w.Code, e, c.field)
		}
	}
}

func TestAuth(t *testing.T) {
	s := New(Options{Token: "t0ken"})
	for _, hdr := range []map[string]string{
		nil,
		{"Authorization": "Bearer wrong"},
		{"Authorization": "Bearer t0ke"},
		{"Authorization": "Basic t0ken"},
		{"X-API-KEY": "t0ken0"},
	} {
		w, e := call(t, s, http.MethodGet, "/v1/sandboxes/x/logs?follow=2", "", hdr)
		if w.Code != http.StatusUnauthorized || e.Code != api.CodeUnauthorized || w.Header().Get("WWW-Authenticate") == "" || e.Message == "" {
			t.Errorf("headers %v: %d %+v, want 401", hdr, w.Code, e)
		}
	}
	// The right token, either way, gets through to the handler (which
	// then refuses the bad parameter).
	for _, hdr := range []map[string]string{auth, {"X-API-KEY": "t0ken"}, {"authorization": "bearer t0ken"}} {
		if w, _ := call(t, s, http.MethodGet, "/v1/sandboxes/x/logs?follow=2", "", hdr); w.Code != http.StatusBadRequest {
			t.Errorf("headers %v: %d, want the handler's 400", hdr, w.Code)
		}
	}
	for _, p := range []string{"/healthz", "/openapi.json"} {
		if w, _ := call(t, s, http.MethodGet, p, "", nil); w.Code != http.StatusOK {
			t.Errorf("%s without a token: %d", p, w.Code)
		}
	}
}

func TestMountSharesAuthAndMetrics(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusMultiStatus)
	})
	self := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !CheckToken(r, "t0ken") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	s := New(Options{Token: "t0ken", Mounts: []Mount{{Prefix: "/e2b/", Handler: h}, {Prefix: "/envd/", Handler: self, Public: true}}})
	if w, _ := call(t, s, http.MethodGet, "/e2b/sandboxes", "", nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("mounted handler without a token: %d", w.Code)
	}
	if w, _ := call(t, s, http.MethodPost, "/e2b/sandboxes", "", map[string]string{"X-API-KEY": "t0ken"}); w.Code != http.StatusMultiStatus {
		t.Fatalf("mounted handler with X-API-KEY: %d", w.Code)
	}
	if !slices.Equal(seen, []string{"/e2b/sandboxes"}) {
		t.Fatalf("handler saw %v, want the full path once", seen)
	}
	if w, _ := call(t, s, http.MethodGet, "/envd/files", "", nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("public mount doing its own check: %d", w.Code)
	}
	if w, _ := call(t, s, http.MethodGet, "/envd/files", "", auth); w.Code != http.StatusAccepted {
		t.Fatalf("public mount with the token: %d", w.Code)
	}
	var out strings.Builder
	s.metrics.write(&out, nil, 0)
	if !strings.Contains(out.String(), `smolvm_api_requests_total{route="/e2b/",code="207"} 1`) {
		t.Fatalf("mounted route missing from metrics:\n%s", out.String())
	}
}

// TestRootServesTheRest: Root gets every path outside /v1/ that no route
// serves, with any method, and nothing the native API serves; it holds
// no slot of the limiter (it takes one itself once it has authenticated
// the request).
func TestRootServesTheRest(t *testing.T) {
	var seen []string
	var s *Server
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		if n := s.limit.InFlight(); n != 0 {
			t.Errorf("root called holding %d slots", n)
		}
		w.WriteHeader(http.StatusTeapot)
	})
	s = New(Options{Token: "t0ken", Root: root, Mounts: []Mount{{Prefix: "/e2b/", Handler: http.NotFoundHandler(), Public: true}}})
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, "/sandboxes", http.StatusTeapot},
		{http.MethodGet, "/v2/sandboxes", http.StatusTeapot},
		{http.MethodDelete, "/templates/x", http.StatusTeapot},
		{http.MethodGet, "/", http.StatusTeapot},
		{http.MethodGet, "/healthz", http.StatusOK},
		{http.MethodGet, "/openapi.json", http.StatusOK},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/sandboxes/x/nope", http.StatusNotFound},
		{http.MethodGet, "/v1", http.StatusNotFound},
		{http.MethodGet, "/e2b/sandboxes", http.StatusNotFound},
	} {
		if w, _ := call(t, s, tc.method, tc.path, "", auth); w.Code != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, w.Code, tc.status)
		}
	}
	want := []string{"POST /sandboxes", "GET /v2/sandboxes", "DELETE /templates/x", "GET /"}
	if !slices.Equal(seen, want) {
		t.Fatalf("root saw %v, want %v", seen, want)
	}
	// Root checks tokens itself, as a public mount does.
	if w, _ := call(t, s, http.MethodGet, "/sandboxes", "", nil); w.Code != http.StatusTeapot {
		t.Fatalf("root without a token: %d", w.Code)
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := LoadToken(dir)
	if err != nil || len(tok) != 64 {
		t.Fatalf("first load: %q %v", tok, err)
	}
	fi, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi.Mode(), err)
	}
	if again, err := LoadToken(dir); err != nil || again != tok {
		t.Fatalf("second load: %q %v, want the same token", again, err)
	}
	os.Chmod(filepath.Join(dir, TokenFile), 0o644)
	if _, err := LoadToken(dir); err == nil || !strings.Contains(err.Error(), "others can read it") {
		t.Fatalf("world-readable token: %v", err)
	}
	// Concurrent first starts agree on one token.
	dir = t.TempDir()
	toks := make([]string, 8)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Go(func() { toks[i], _ = LoadToken(dir) })
	}
	wg.Wait()
	for _, x := range toks {
		if x == "" || x != toks[0] {
			t.Fatalf("concurrent first loads: %q", toks)
		}
	}
}
