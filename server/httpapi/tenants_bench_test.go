package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/internal/testmgr"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
)

// BenchmarkTenantAuth: what a tenant's key costs per request against the
// admin token (today's single-token mode), alternating in one loop over
// one server: GET of a sandbox (key lookup in SQLite, scoped record
// lookup) and an exec round trip of `true`. The tenant has a quota, so
// its lookups take the scoped path.
func BenchmarkTenantAuth(b *testing.B) {
	env := testmgr.New(b)
	ctx := context.Background()
	ts := env.Manager.Tenants()
	if _, err := ts.Add(ctx, "bench", sandbox.Quota{Sandboxes: 10, Memory: 8 << 30}); err != nil {
		b.Fatal(err)
	}
	_, key, err := ts.AddKey(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	sb, err := env.Manager.Create(tenant.With(ctx, "bench"), sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Token: "admin-token", TempDir: b.TempDir()}))
	b.Cleanup(hs.Close)
	get := func(cred string) time.Duration {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/sandboxes/"+sb.ID, nil)
		req.Header.Set("Authorization", "Bearer "+cred)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET: %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	clients := map[string]*client.Client{}
	for _, cred := range []string{"admin-token", key} {
		if clients[cred], err = client.New(hs.URL, cred); err != nil {
			b.Fatal(err)
		}
	}
	exec := func(cred string) time.Duration {
		start := time.Now()
		exit, err := clients[cred].Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
		if err != nil || exit.Code != 0 {
			b.Fatalf("exec: %+v %v", exit, err)
		}
		return time.Since(start)
	}
	var adminGet, tenantGet, adminExec, tenantExec []time.Duration
	for b.Loop() {
		adminGet, tenantGet = append(adminGet, get("admin-token")), append(tenantGet, get(key))
		adminExec, tenantExec = append(adminExec, exec("admin-token")), append(tenantExec, exec(key))
	}
	report(b, "get-admin-", adminGet)
	report(b, "get-tenant-", tenantGet)
	report(b, "exec-admin-", adminExec)
	report(b, "exec-tenant-", tenantExec)
}
