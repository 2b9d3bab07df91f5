package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/testmgr"
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

// BenchmarkTenantLoad: create (started) and exec `true` through the API
// with 1, 10 and 20 tenants at once, each with its own key and quota and
// one sandbox, removed after; every level in each iteration, so that they
// share the machine's load. go test -run X -bench TenantLoad -benchtime 3x.
func BenchmarkTenantLoad(b *testing.B) {
	env := testmgr.New(b)
	ctx := context.Background()
	ts := env.Manager.Tenants()
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Token: "admin-token", TempDir: b.TempDir()}))
	b.Cleanup(hs.Close)
	const most = 20
	clients := make([]*client.Client, most)
	for i := range most {
		name := fmt.Sprintf("t%d", i)
		if _, err := ts.Add(ctx, name, sandbox.Quota{Sandboxes: 2, Memory: 4 << 30, CPUs: 2, CreatesPerMinute: 600}); err != nil {
			b.Fatal(err)
		}
		_, key, err := ts.AddKey(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if clients[i], err = client.New(hs.URL, key); err != nil {
			b.Fatal(err)
		}
	}
	levels := []int{1, 10, 20}
	creates, execs := map[int][]time.Duration{}, map[int][]time.Duration{}
	var mu sync.Mutex
	for b.Loop() {
		for _, n := range levels {
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					c := clients[i]
					start := time.Now()
					sb, err := c.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Limits: sandbox.Limits{Memory: 256 << 20}}})
					if err != nil {
						b.Errorf("tenant %d: create: %v", i, err)
						return
					}
					created := time.Since(start)
					start = time.Now()
					exit, err := c.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
					if err != nil || exit.Code != 0 {
						b.Errorf("tenant %d: exec: %+v %v", i, exit, err)
					}
					ran := time.Since(start)
					if err := c.Remove(ctx, sb.ID, true); err != nil {
						b.Errorf("tenant %d: rm: %v", i, err)
					}
					mu.Lock()
					creates[n], execs[n] = append(creates[n], created), append(execs[n], ran)
					mu.Unlock()
				})
			}
			wg.Wait()
		}
	}
	for _, n := range levels {
		report(b, fmt.Sprintf("create-%dt-", n), creates[n])
		report(b, fmt.Sprintf("exec-%dt-", n), execs[n])
	}
}

// BenchmarkQuotaCost: what a tenant's quota admission and usage
// accounting cost. Creates alternate in one loop between the admin token
// (no quota checks) and a tenant's key under a quota, through one server;
// and a usage pass (Manager.Account, which smolvm serve runs every 5 s)
// is timed over the running sandboxes, per sandbox.
// go test -run X -bench QuotaCost -benchtime 20x.
func BenchmarkQuotaCost(b *testing.B) {
	env := testmgr.New(b)
	ctx := context.Background()
	ts := env.Manager.Tenants()
	if _, err := ts.Add(ctx, "q", sandbox.Quota{Sandboxes: 100, Memory: 100 << 30, CPUs: 100, CreatesPerMinute: 1000}); err != nil {
		b.Fatal(err)
	}
	_, key, err := ts.AddKey(ctx, "q")
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Token: "admin-token", TempDir: b.TempDir()}))
	b.Cleanup(hs.Close)
	admin, err := client.New(hs.URL, "admin-token")
	if err != nil {
		b.Fatal(err)
	}
	tenantC, err := client.New(hs.URL, key)
	if err != nil {
		b.Fatal(err)
	}
	// Sandboxes that stay, so that admission has records to count and
	// accounting has sandboxes to read.
	for range 5 {
		if _, err := tenantC.Create(ctx, sandbox.CreateOptions{Start: true}); err != nil {
			b.Fatal(err)
		}
	}
	create := func(c *client.Client) time.Duration {
		start := time.Now()
		sb, err := c.Create(ctx, sandbox.CreateOptions{Start: false})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Remove(ctx, sb.ID, true); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var plain, quota, account []time.Duration
	for b.Loop() {
		plain, quota = append(plain, create(admin)), append(quota, create(tenantC))
		start := time.Now()
		if err := env.Manager.Account(ctx); err != nil {
			b.Fatal(err)
		}
		account = append(account, time.Since(start)/5)
	}
	report(b, "create-admin-", plain)
	report(b, "create-quota-", quota)
	report(b, "account-per-sandbox-", account)
}
