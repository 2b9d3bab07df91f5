package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
)

// TestAuthBeforeRouting: without the token every path and method is a
// 401, known or not, so a caller learns nothing about routes; with it,
// an unknown path is a JSON 404 and a wrong method a JSON 405 that lists
// the allowed ones.
func TestAuthBeforeRouting(t *testing.T) {
	s := New(Options{Token: "t0ken"})
	for _, c := range []struct{ method, path string }{
		{"GET", "/nope"}, {"DELETE", "/v1/sandboxes"}, {"PATCH", "/v1/sandboxes/x"}, {"POST", "/v1/images"},
		{"GET", "/v1/../healthz/x"}, {"GET", "/v1/sandboxes/%2e%2e"}, {"PUT", "/healthz"}, {"OPTIONS", "/v1/sandboxes"},
	} {
		if w, e := call(t, s, c.method, c.path, "", nil); w.Code != http.StatusUnauthorized || e.Code != api.CodeUnauthorized {
			t.Errorf("%s %s without a token: %d %+v, want 401", c.method, c.path, w.Code, e)
		}
	}
	w, e := call(t, s, "GET", "/nope", "", auth)
	if w.Code != http.StatusNotFound || e.Code != api.CodeNotFound || !strings.Contains(e.Message, "/nope") {
		t.Errorf("unknown path: %d %+v", w.Code, e)
	}
	w, e = call(t, s, "DELETE", "/v1/sandboxes", "", auth)
	if w.Code != http.StatusMethodNotAllowed || e.Code != api.CodeMethod || w.Header().Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("wrong method: %d %+v, Allow %q", w.Code, e, w.Header().Get("Allow"))
	}
	// Paths that the mux would redirect elsewhere are refused instead.
	for _, p := range []string{"/v1/sandboxes/x/../y", "/v1/sandboxes/%2e%2e/start", "/v1//sandboxes", "/v1/sandboxes/", "/v1/%ff", "/v1/a%00"} {
		if w, e := call(t, s, "GET", p, "", auth); w.Code != http.StatusBadRequest || e.Code != api.CodeInvalid {
			t.Errorf("GET %s: %d %+v, want 400", p, w.Code, e)
		}
	}
	// Public routes stay public.
	if w, _ := call(t, s, "GET", "/healthz", "", nil); w.Code != http.StatusOK {
		t.Errorf("/healthz: %d", w.Code)
	}
}

// TestBodyLimit sends bodies over the limit to a real listener, declared
// and chunked, with and without the token and with Expect: 100-continue:
// each gets its answer (413 with the limit in the message, or 401), never
// a reset, and the same connection is not left half-read.
func TestBodyLimit(t *testing.T) {
	hs := httptest.NewServer(New(Options{Token: "t0ken"}))
	defer hs.Close()
	big := bytes.Repeat([]byte("x"), 20<<20)
	for _, c := range []struct {
		name    string
		path    string
		body    io.Reader
		token   bool
		expect  bool
		status  int
		mention string
	}{
		{"declared", "/v1/sandboxes/x/exec", bytes.NewReader(big), true, false, http.StatusRequestEntityTooLarge, "1048576 bytes"},
		{"chunked", "/v1/sandboxes/x/exec", io.MultiReader(bytes.NewReader(big)), true, false, http.StatusRequestEntityTooLarge, "1048576 bytes"},
		{"100-continue", "/v1/sandboxes/x/exec", bytes.NewReader(big), true, true, http.StatusRequestEntityTooLarge, "1048576 bytes"},
		{"a route that reads no body", "/v1/sandboxes", bytes.NewReader(big), true, false, http.StatusBadRequest, "takes no request body"},
		{"unknown route", "/v1/nope", bytes.NewReader(big), true, false, http.StatusNotFound, "no such route"},
		{"no token", "/v1/sandboxes/x/exec", bytes.NewReader(big), false, false, http.StatusUnauthorized, "token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			method := http.MethodPost
			if c.path == "/v1/sandboxes" {
				method = http.MethodGet
			}
			req, _ := http.NewRequest(method, hs.URL+c.path, c.body)
			if c.token {
				req.Header.Set("Authorization", "Bearer t0ken")
			}
			if c.expect {
				req.Header.Set("Expect", "100-continue")
			}
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			var e api.Error
			b, _ := io.ReadAll(resp.Body)
			json.Unmarshal(b, &e)
			if resp.StatusCode != c.status || !strings.Contains(e.Message, c.mention) {
				t.Fatalf("%d %s, want %d mentioning %q", resp.StatusCode, b, c.status, c.mention)
			}
		})
	}
	// An upload declared over its own limit is refused before a byte is
	// read; the JSON limit does not apply to it.
	s := New(Options{Token: "t0ken", MaxUpload: 4 << 20})
	for _, n := range []int{5 << 20, 2 << 20} {
		r := httptest.NewRequest(http.MethodPut, "/v1/sandboxes/%2e/files?path=/f", bytes.NewReader(make([]byte, n)))
		r.Header.Set("Authorization", "Bearer t0ken")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Errorf("upload of %d bytes to a bad name: %d, want the name's 400", n, w.Code)
		}
	}
	r := httptest.NewRequest(http.MethodPut, "/v1/sandboxes/x/files?path=/f", bytes.NewReader(make([]byte, 5<<20)))
	r.Header.Set("Authorization", "Bearer t0ken")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "4194304 bytes") {
		t.Errorf("upload over its limit: %d %s", w.Code, w.Body)
	}
}

// TestBodylessRoutes: every route that openapi.json gives no request body
// refuses one, declared or chunked, with a JSON 400 naming the route,
// before its handler runs (this server has no Manager to reach).
func TestBodylessRoutes(t *testing.T) {
	var doc openapiDoc
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Token: "t0ken"})
	n := 0
	for _, pattern := range s.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		var op struct {
			RequestBody json.RawMessage `json:"requestBody"`
		}
		json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op)
		if op.RequestBody != nil || s.proxied[pattern] {
			continue
		}
		n++
		for _, w := range httpguard.Wildcards(path) {
			v := "x"
			switch w {
			case "key":
				v = "ab" // key IDs are hex
			case "port":
				v = "8080"
			}
			path = strings.Replace(path, "{"+w+"}", v, 1)
		}
		for _, chunked := range []bool{false, true} {
			var b io.Reader = strings.NewReader("{}")
			if chunked {
				b = io.MultiReader(b) // no length: sent chunked
			}
			r := httptest.NewRequest(method, path, b)
			r.Header.Set("Authorization", "Bearer t0ken")
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			var e api.Error
			json.Unmarshal(w.Body.Bytes(), &e)
			if w.Code != http.StatusBadRequest || e.Code != api.CodeInvalid || !strings.Contains(e.Message, pattern+" takes no request body") {
				t.Errorf("%s with a body (chunked %v): %d %s", pattern, chunked, w.Code, w.Body)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d routes without a body: is openapi.json read right?", n)
	}
}
