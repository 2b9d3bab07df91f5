package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/server/e2b"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/tests/testmgr"
)

// Routes that take no name, path or ID at all. Every other route is tried
// with bad names below; a new route must be added to one or the other.
var (
	nativeNameless = []string{"GET /healthz", "GET /openapi.json", "GET /metrics", "GET /v1/events", "GET /v1/sandboxes",
		"GET /v1/images", "GET /v1/snapshots", "GET /v1/pools", "GET /v1/tenants", "GET /v1/usage", "GET /v1/templates", "GET /v1/volumes", "/e2b/",
		// A run's repo is a path on the server's host, not a name in the
		// data dir: TestAgentRunsAPI checks it (absolute, a git work tree).
		"GET /v1/agent/runs", "POST /v1/agent/runs", "GET /v1/agent/branches",
		// So is project memory's repo (admin only, as agent runs).
		"GET /v1/memory", "POST /v1/memory", "POST /v1/memory/verify"}
	e2bNameless = []string{"GET /sandboxes", "GET /v2/sandboxes", "GET /volumes"}
)

// TestNamesOnEveryRoute sends malformed names (traversal, over-long,
// empty, NUL, non-UTF-8) in every name a route takes, on the native API
// and the E2B surface: the path parameters of every registered route, and
// the names and paths in bodies, queries and envd's headers. Each must be
// a 400 in its API's error shape with a message saying what is wrong; no
// file may appear outside the data dir (traversals aim at a canary
// directory beside it), and no answer may name the data dir.
func TestNamesOnEveryRoute(t *testing.T) {
	var e2bRoutes, envdRoutes []string
	f := newFixtureOn(t, func(o *httpapi.Options, env *testmgr.Env) {
		b, err := build.New(context.Background(), env.Manager, env.Dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := e2b.OpenState(context.Background(), env.Store)
		if err != nil {
			t.Fatal(err)
		}
		h, err := e2b.New(context.Background(), e2b.Options{Manager: env.Manager, State: st, Snapshots: env.Snapshots,
			Authorize: func(r *http.Request) (*http.Request, bool) { return httpapi.Authenticate(r, token, nil) }, Ports: ports.New(env.Manager.DialPort),
			Builder: b, UploadDir: t.TempDir(), Images: env.Images})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		e2bRoutes, envdRoutes = h.Routes()
		o.Mounts = []httpapi.Mount{{Prefix: "/e2b/", Handler: http.StripPrefix("/e2b", h), Public: true}}
	})
	data := f.env.Dir
	canary := t.TempDir() // beside the data dir, where traversals aim
	before := tree(t, data)

	// The sandbox that routes needing a real one use, made through E2B for
	// its envd token.
	code, body, _ := f.do(http.MethodPost, "/e2b/sandboxes", `{"templateID":"base"}`, "X-API-KEY", token)
	var sb struct{ SandboxID, EnvdAccessToken string }
	if code != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create: %d %s", code, body)
	}

	// Path segments, as sent: traversals (some aimed at the canary from
	// the data dir's subdirectories), over-long, empty, NUL, not UTF-8.
	var aimed []string
	for up := 1; up <= 5; up++ {
		aimed = append(aimed, strings.Repeat("../", up)+filepath.Base(canary)+"/pwned")
	}
	segments := []string{"..", "%2e%2e", ".%2E", "..%2Fx", strings.Repeat("a", 300), "", "%00", "a%00b", "%ff", "a%2Fb"}
	for _, a := range aimed {
		segments = append(segments, url.PathEscape(a))
	}
	// The same as values (bodies, queries, headers); "" means the default
	// there, and is left out.
	values := append([]string{"..", "../x", strings.Repeat("a", 300), "a\x00b", "\xff"}, aimed...)

	var sent int
	check := func(what string, code int, body []byte, sh shape) {
		t.Helper()
		sent++
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", what, code, body)
			return
		}
		var e struct {
			Code     any
			Message  string
			Error    string
			Field    string
			Explicit bool
		}
		if json.Unmarshal(body, &e) != nil {
			t.Errorf("%s: not a JSON error: %s", what, body)
			return
		}
		msg := e.Message
		switch sh {
		case native:
			msg = e.Error
			if e.Code != api.CodeInvalid {
				t.Errorf("%s: code %v, want %q", what, e.Code, api.CodeInvalid)
			}
		case e2bAPI:
			if e.Code != float64(400) {
				t.Errorf("%s: code %v, want E2B's 400", what, e.Code)
			}
		case connect:
			if e.Code != "invalid_argument" {
				t.Errorf("%s: code %v, want Connect's invalid_argument", what, e.Code)
			}
		}
		if !utf8.ValidString(msg) || !containsAny(msg, "name", "path", "reference", "port", "ID", "segment", "required", "UTF-8") {
			t.Errorf("%s: unclear message %q", what, msg)
		}
	}
	// Every answer, whatever it is, must not name the data dir.
	do := func(method, path, body string, hdr ...string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if bytes.Contains(b, []byte(data)) || bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s %s: the answer names a host path: %s", method, path, b)
		}
		return resp.StatusCode, b
	}
	// names sends every bad segment in each of pattern's path parameters
	// (with prefix before the path), then every bad value in each of
	// fields: a body's JSON field, or a query parameter ("?path").
	names := func(prefix, pattern string, fields []string, sh shape, hdr ...string) {
		method, tmpl, _ := strings.Cut(pattern, " ")
		for _, seg := range segments {
			if len(httpguard.Wildcards(pattern)) == 0 {
				break
			}
			path := tmpl
			for _, w := range httpguard.Wildcards(pattern) {
				path = strings.ReplaceAll(path, "{"+w+"}", seg)
			}
			code, body := do(method, prefix+path, "{}", hdr...)
			check(method+" "+prefix+path, code, body, sh)
		}
		path := prefix + strings.NewReplacer("{id}", sb.SandboxID, "{snapshot}", "nosnap").Replace(tmpl)
		for _, field := range fields {
			q, isQuery := strings.CutPrefix(field, "?")
			vals := values
			if q == "path" {
				vals = append(vals, "", "rel/x", "/"+strings.Repeat("a", 5000))
			}
			for _, v := range vals {
				what := pattern + " " + field + "=" + strings.ToValidUTF8(v, "?")
				if isQuery {
					code, body := do(method, path+"?"+q+"="+url.QueryEscape(v), "", hdr...)
					check(what, code, body, sh)
					continue
				}
				code, body := do(method, path, jsonBody(field, v), hdr...)
				check(what, code, body, sh)
			}
		}
	}

	// The native API.
	nativeFields := map[string][]string{
		"POST /v1/sandboxes":                    {"name", "image", "pool"},
		"POST /v1/pools":                        {"name", "image"},
		"POST /v1/templates":                    {"name", "image"},
		"POST /v1/tenants":                      {"name"},
		"POST /v1/volumes":                      {"name"},
		"POST /v1/images":                       {"ref"},
		"POST /v1/sandboxes/{id}/checkpoint":    {"name"},
		"POST /v1/sandboxes/{id}/fork":          {"name_prefix"},
		"POST /v1/snapshots/{snapshot}/restore": {"name"},
		"POST /v1/snapshots/import":             {"?name"},
		"PUT /v1/sandboxes/{id}/files":          {"?path"},
		"GET /v1/sandboxes/{id}/files":          {"?path"},
		"POST /v1/browsers/golden":              {"golden", "image"},
		"POST /v1/browsers":                     {"golden", "name"},
		"POST /v1/browsers/screenshot":          {"golden"},
	}
	for _, pattern := range f.srv.Routes() {
		if len(httpguard.Wildcards(pattern)) == 0 && nativeFields[pattern] == nil {
			if !slices.Contains(nativeNameless, pattern) {
				t.Errorf("route %q: not covered; add the names it takes to this test, or it to nativeNameless", pattern)
			}
			continue
		}
		names("", pattern, nativeFields[pattern], native)
	}

	// E2B's control plane.
	key := []string{"X-API-KEY", token}
	e2bFields := map[string][]string{
		"POST /sandboxes":                {"templateID"},
		"POST /v2/sandboxes":             {"templateID"},
		"POST /sandboxes/{id}/snapshots": {"name"},
		"GET /snapshots":                 {"?sandboxID", "?name"},
		"POST /v3/templates":             {"name"},
		"POST /templates/tags":           {"target"},
		"POST /volumes":                  {"name"},
	}
	for _, pattern := range e2bRoutes {
		if len(httpguard.Wildcards(pattern)) == 0 && e2bFields[pattern] == nil {
			if !slices.Contains(e2bNameless, pattern) {
				t.Errorf("E2B route %q: not covered; add the names it takes to this test, or it to e2bNameless", pattern)
			}
			continue
		}
		names("/e2b", pattern, e2bFields[pattern], e2bAPI, key...)
	}

	// envd: every route takes the sandbox's ID and port in headers; the
	// file system and /files take paths too.
	envd := []string{"E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken, "Content-Type", "application/json"}
	envdFields := map[string][]string{
		"POST /filesystem.Filesystem/Stat":    {"path"},
		"POST /filesystem.Filesystem/ListDir": {"path"},
		"POST /filesystem.Filesystem/MakeDir": {"path"},
		"POST /filesystem.Filesystem/Remove":  {"path"},
		"POST /filesystem.Filesystem/Move":    {"source", "destination"},
		"GET /files":                          {"?path"},
		"POST /files":                         {"?path"},
	}
	for _, pattern := range envdRoutes {
		method, path, _ := strings.Cut(pattern, " ")
		sh := connect
		if path == "/files" || path == "/health" {
			sh = e2bAPI
		}
		for _, v := range values {
			if strings.ContainsRune(v, 0) {
				continue // no client can send it in a header
			}
			code, body := do(method, "/e2b"+path, "{}", "E2b-Sandbox-Id", v, "X-Access-Token", "x")
			check(pattern+" E2b-Sandbox-Id="+strings.ToValidUTF8(v, "?"), code, body, sh)
		}
		for _, v := range []string{"0", "65536", "../x", "\xff", strings.Repeat("9", 300)} {
			code, body := do(method, "/e2b"+path, "{}", append(envd, "E2b-Sandbox-Port", v)...)
			check(pattern+" E2b-Sandbox-Port="+strings.ToValidUTF8(v, "?"), code, body, sh)
		}
		if path == "/files" {
			envd := append(envd, "Content-Type", "application/octet-stream")
			upload := "x" // a GET takes no body (httpguard.Bodiless)
			if method == http.MethodGet {
				upload = ""
			}
			for _, v := range append(values, "/"+strings.Repeat("a", 5000)) {
				code, body := do(method, "/e2b/files?path="+url.QueryEscape(v), upload, envd...)
				check(pattern+" path="+strings.ToValidUTF8(v, "?"), code, body, sh)
			}
			continue
		}
		for _, field := range envdFields[pattern] {
			// Move needs both; the other one is fine.
			other := map[string]string{"source": `"destination":"/tmp/b",`, "destination": `"source":"/tmp/a",`}[field]
			for _, v := range append(values, "", "/"+strings.Repeat("a", 5000)) {
				code, body := do(method, "/e2b"+path, "{"+other+strings.TrimPrefix(jsonBody(field, v), "{"), envd...)
				check(pattern+" "+field+"="+strings.ToValidUTF8(v, "?"), code, body, sh)
			}
		}
	}
	if sent < 500 {
		t.Fatalf("only %d bad names sent", sent)
	}

	if after := tree(t, data); !slices.Equal(before, after) {
		t.Errorf("files appeared outside the data dir:\nbefore %q\nafter  %q", before, after)
	}
}

// shape is an API's error shape.
type shape int

const (
	native  shape = iota // {"code":"invalid","error":…}
	e2bAPI               // E2B's {"code":400,"message":…}
	connect              // Connect's {"code":"invalid_argument","message":…}
)

// jsonBody is a JSON object with field set to v, bad UTF-8 and all, as a
// hostile client would send it.
func jsonBody(field, v string) string {
	q, _ := json.Marshal(v)
	if !utf8.ValidString(v) {
		q = []byte(`"` + v + `"`)
	}
	return `{"` + field + `":` + string(q) + "}"
}

// tree lists what is outside data: everything under data's parent (the
// test's temporary directory: the canary is there) but data itself, and
// at the top of / and /tmp what a traversal here would make.
func tree(t *testing.T, data string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Dir(data), func(p string, d fs.DirEntry, err error) error {
		if p == data {
			return filepath.SkipDir
		}
		out = append(out, p)
		return nil
	})
	// Other processes come and go in / and /tmp: look only for what the
	// bad names here would make.
	for _, dir := range []string{"/", os.TempDir()} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := strings.TrimSuffix(e.Name(), ".lock"); n == "x" || n == "pwned" || strings.HasPrefix(n, "aaaa") {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
