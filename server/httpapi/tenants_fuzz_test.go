package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/testmgr"
)

// fuzzRoutes are the tenant-facing requests FuzzTenantRoutes sends, V
// standing for the fuzzed value (escaped into paths and queries) and the
// fuzzed body going with each. admin marks the admin's routes.
var fuzzRoutes = []struct {
	method, path string
	admin        bool
}{
	{"POST", "/v1/tenants", true},
	{"PUT", "/v1/tenants/V/quota", true},
	{"GET", "/v1/tenants/V", true},
	{"POST", "/v1/tenants/V/keys", true},
	{"DELETE", "/v1/tenants/V/keys/V", true},
	{"DELETE", "/v1/tenants/V", true},
	{"GET", "/v1/usage?since=V&by=V&tenant=V", false},
	{"POST", "/v1/sandboxes", false},
	{"GET", "/v1/sandboxes/V", false},
	{"POST", "/v1/sandboxes/V/exec", false},
	{"PUT", "/v1/sandboxes/V/files?path=V", false},
	{"POST", "/v1/sandboxes/V/fork", false},
	{"POST", "/v1/snapshots/V/restore", false},
	{"DELETE", "/v1/pools/V", false},
}

// FuzzTenantRoutes sends fuzzed path values, query values and bodies to
// the tenant routes (as the admin) and the sandbox routes (as a tenant's
// key) of a real server over a real data dir, one route per input. No
// answer is a 5xx or anything but a JSON error with a readable message; a
// tenant's key never gets past an admin route, and never gets a sandbox:
// its quota (1 byte of memory) refuses any create that passes the checks.
// The seeds run in every go test; the bounded run is
// go test -run X -fuzz FuzzTenantRoutes -fuzztime 10000x ./server/httpapi.
func FuzzTenantRoutes(f *testing.F) {
	for i := range fuzzRoutes {
		for _, seed := range []struct{ v, body string }{
			{"fz", `{}`}, {"t1", `{"name":"t1","quota":{"sandboxes":2}}`}, {"..", `{"sandboxes":-1}`},
			{"%2e%2e%2f", `{"name":"../x"}`}, {"\xff", "\xff"}, {strings.Repeat("a", 300), `null`},
			{"admin", `{"name":"admin"}`}, {"24h", `{"memory":"1g","name":"box"}`}, {"label", `{"labels":{"a=b":"c"}}`},
			{"0123456789ab", `{"args":["true"]}`}, {"", `{"n":1000000}`}, {"1e400", `{"memory":1e300}`},
		} {
			f.Add(uint8(i), seed.v, []byte(seed.body))
		}
	}
	env := testmgr.New(f)
	ctx := context.Background()
	ts := env.Manager.Tenants()
	if _, err := ts.Add(ctx, "fz", sandbox.Quota{Memory: 1}); err != nil {
		f.Fatal(err)
	}
	_, key, err := ts.AddKey(ctx, "fz")
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Images: env.Images, Snapshots: env.Snapshots, Token: "admin-token", TempDir: f.TempDir()}))
	f.Cleanup(hs.Close)
	f.Fuzz(func(t *testing.T, sel uint8, v string, body []byte) {
		r := fuzzRoutes[int(sel)%len(fuzzRoutes)]
		if r.admin && strings.Contains(r.path, "V") && v == "fz" {
			return // the key's own tenant, key and quota stay
		}
		path := strings.ReplaceAll(r.path, "V", url.PathEscape(v))
		if p, q, ok := strings.Cut(r.path, "?"); ok {
			path = strings.ReplaceAll(p, "V", url.PathEscape(v)) + "?" + strings.ReplaceAll(q, "V", url.QueryEscape(v))
		}
		for _, cred := range []string{"admin-token", key} {
			if cred == "admin-token" && !r.admin {
				continue // the admin's creates would make sandboxes
			}
			req, err := http.NewRequest(r.method, hs.URL+path, strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+cred)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", r.method, path, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			who := map[bool]string{true: "admin", false: "tenant"}[cred == "admin-token"]
			switch {
			case resp.StatusCode >= 500:
				t.Fatalf("%s %s %q as %s: %d %s", r.method, path, body, who, resp.StatusCode, got)
			case resp.StatusCode >= 400:
				var e api.Error
				if json.Unmarshal(got, &e) != nil || e.Message == "" || !utf8.ValidString(e.Message) {
					t.Fatalf("%s %s %q as %s: %d with body %q", r.method, path, body, who, resp.StatusCode, got)
				}
			case who == "tenant" && (r.admin || r.method == "POST"):
				t.Fatalf("%s %s %q: the tenant's key got %d %s", r.method, path, body, resp.StatusCode, got)
			}
		}
		if sbs, err := env.Manager.List(tenant.With(ctx, "fz")); err != nil || len(sbs) != 0 {
			t.Fatalf("the tenant has sandboxes: %v %v", sbs, err)
		}
	})
}
