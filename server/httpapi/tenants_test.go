package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testdeps"
)

// tenantFixture is a server with tenants a and b, each with a key and a
// client on it.
type tenantFixture struct {
	*fixture
	keys    map[string]string // tenant: key secret
	keyIDs  map[string]string
	clients map[string]*client.Client
}

func newTenantFixture(t *testing.T) *tenantFixture {
	return withTenants(t, newFixture(t, nil))
}

// withTenants adds tenants a and b to f's server.
func withTenants(t *testing.T, f *fixture) *tenantFixture {
	tf := &tenantFixture{fixture: f, keys: map[string]string{}, keyIDs: map[string]string{}, clients: map[string]*client.Client{}}
	for _, name := range []string{"a", "b"} {
		if code, body, _ := f.do("POST", "/v1/tenants", `{"name":"`+name+`"}`); code != http.StatusCreated {
			t.Fatalf("add tenant %s: %d %s", name, code, body)
		}
		code, body, _ := f.do("POST", "/v1/tenants/"+name+"/keys", "")
		var k api.NewKey
		if code != http.StatusCreated || json.Unmarshal(body, &k) != nil || k.Key == "" {
			t.Fatalf("key for %s: %d %s", name, code, body)
		}
		tf.keys[name], tf.keyIDs[name] = k.Key, k.ID
		c, err := client.New(f.url, k.Key)
		if err != nil {
			t.Fatal(err)
		}
		tf.clients[name] = c
	}
	return tf
}

// as sends a request with tenant's key.
func (tf *tenantFixture) as(tenant, method, path, body string) (int, string) {
	tf.t.Helper()
	code, b, _ := tf.do(method, path, body, "Authorization", "Bearer "+tf.keys[tenant])
	return code, string(b)
}

func TestTenantIsolation(t *testing.T) {
	tf := newTenantFixture(t)
	ctx := context.Background()
	a, b := tf.clients["a"], tf.clients["b"]

	// b's event stream must never carry a's sandboxes.
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	events := make(chan sandbox.Event, 64)
	go b.Events(evCtx, func(e sandbox.Event) error { events <- e; return nil })
	time.Sleep(200 * time.Millisecond) // the stream is open before the creates

	if _, err := a.Create(ctx, sandbox.CreateOptions{Name: "a-box", Start: true, Config: sandbox.Config{TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Checkpoint(ctx, "a-box", sandbox.CheckpointOptions{Name: "a-snap"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreatePool(ctx, api.PoolRequest{Name: "a-pool", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, sandbox.CreateOptions{Name: "b-box", Start: true, Config: sandbox.Config{TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if e.Name == "a-box" {
			t.Fatalf("b saw a's event %+v", e)
		}
		if e.Name == "b-box" && e.Type == "started" {
			break
		}
	}

	// Every route on a's objects answers b exactly as on objects that
	// never existed (the name aside).
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/%s", ""},
		{"DELETE", "/v1/sandboxes/%s?force=true", ""},
		{"POST", "/v1/sandboxes/%s/start", ""},
		{"POST", "/v1/sandboxes/%s/stop", ""},
		{"POST", "/v1/sandboxes/%s/timeout", `{"timeout":"1m"}`},
		{"POST", "/v1/sandboxes/%s/exec", `{"args":["true"]}`},
		{"GET", "/v1/sandboxes/%s/files?path=/etc/hostname", ""},
		{"PUT", "/v1/sandboxes/%s/files?path=/tmp/x", "x"},
		{"GET", "/v1/sandboxes/%s/logs", ""},
		{"GET", "/v1/sandboxes/%s/stats", ""},
		{"POST", "/v1/sandboxes/%s/checkpoint", `{}`},
		{"POST", "/v1/sandboxes/%s/fork", `{"n":1}`},
		{"POST", "/v1/sandboxes/%s/pause", ""},
		{"POST", "/v1/sandboxes/%s/resume", ""},
		{"GET", "/v1/sandboxes/%s/network", ""},
		{"GET", "/v1/sandboxes/%s/network/events", ""},
		{"GET", "/v1/sandboxes/%s/ports/8080/", ""},
	}
	same := func(method, pathFmt, body, theirs, missing string) {
		t.Helper()
		c1, b1 := tf.as("b", method, strings.Replace(pathFmt, "%s", theirs, 1), body)
		c2, b2 := tf.as("b", method, strings.Replace(pathFmt, "%s", missing, 1), body)
		if c1 != c2 || strings.ReplaceAll(b1, theirs, missing) != b2 {
			t.Errorf("%s %s: another tenant's gets %d %s; a missing one %d %s", method, pathFmt, c1, b1, c2, b2)
		}
		if c1 < 400 {
			t.Errorf("%s %s: b reached a's object: %d %s", method, pathFmt, c1, b1)
		}
	}
	for _, r := range routes {
		same(r.method, r.path, r.body, "a-box", "zz-box")
	}
	// The ID (and an ID prefix) too.
	sb, err := a.Get(ctx, "a-box")
	if err != nil || sb.Tenant != "a" {
		t.Fatalf("a's own sandbox: %+v %v", sb, err)
	}
	same("GET", "/v1/sandboxes/%s", "", sb.ID, "0123456789abcdef")
	same("GET", "/v1/sandboxes/%s", "", sb.ID[:8], "01234567")
	same("GET", "/v1/snapshots/%s", "", "a-snap", "zz-snap")
	same("DELETE", "/v1/snapshots/%s", "", "a-snap", "zz-snap")
	same("POST", "/v1/snapshots/%s/restore", `{}`, "a-snap", "zz-snap")
	same("DELETE", "/v1/pools/%s", "", "a-pool", "zz-pool")
	same("POST", "/v1/pools/%s/fill", "", "a-pool", "zz-pool")
	if _, err := b.Create(ctx, sandbox.CreateOptions{Pool: "a-pool"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("b created from a's pool: %v", err)
	}

	// Lists hold only one's own; the admin sees everything.
	names := func(c *client.Client) (sbs, snaps, pools []string) {
		t.Helper()
		l, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l {
			sbs = append(sbs, s.Name)
		}
		sn, err := c.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sn {
			snaps = append(snaps, s.Name)
		}
		ps, err := c.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			pools = append(pools, p.Name)
		}
		return
	}
	for who, want := range map[string]string{"a": "[a-box] [a-snap] [a-pool]", "b": "[b-box] [] []"} {
		s1, s2, s3 := names(tf.clients[who])
		if got := strings.Join([]string{fmtList(s1), fmtList(s2), fmtList(s3)}, " "); got != want {
			t.Errorf("%s lists %s, want %s", who, got, want)
		}
	}
	if s1, s2, s3 := names(tf.c); len(s1) != 2 || len(s2) != 1 || len(s3) != 1 {
		t.Errorf("admin lists %v %v %v, want everything", s1, s2, s3)
	}

	// a works on its own sandbox; b on its own.
	var out strings.Builder
	if exit, err := a.Exec(ctx, "a-box", sandbox.Process{Args: []string{"hostname"}}, sandbox.Stdio{Stdout: &out}); err != nil || exit.Code != 0 || out.String() != "a-box\n" {
		t.Fatalf("a's exec: %q %+v %v", out.String(), exit, err)
	}

	// Admin routes and metrics are the admin's.
	for _, p := range []string{"/v1/tenants", "/v1/tenants/a", "/metrics"} {
		if code, body := tf.as("b", "GET", p, ""); code != http.StatusForbidden {
			t.Errorf("b GET %s: %d %s", p, code, body)
		}
	}
	if code, body := tf.as("b", "POST", "/v1/tenants/b/keys", ""); code != http.StatusForbidden {
		t.Errorf("b made itself a key: %d %s", code, body)
	}

	// Revoking a key while serving: the next request is refused.
	if code, body, _ := tf.do("DELETE", "/v1/tenants/a/keys/"+tf.keyIDs["a"], ""); code != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if code, body := tf.as("a", "GET", "/v1/sandboxes", ""); code != http.StatusUnauthorized {
		t.Fatalf("revoked key: %d %s", code, body)
	}
	if code, _ := tf.as("b", "GET", "/v1/sandboxes", ""); code != http.StatusOK {
		t.Fatalf("b's key stopped working with a's revoked: %d", code)
	}
}

func fmtList(s []string) string { return "[" + strings.Join(s, " ") + "]" }

func TestTenantQuota(t *testing.T) {
	tf := newTenantFixture(t)
	ctx := context.Background()
	b := tf.clients["b"]
	setQuota := func(q string) {
		t.Helper()
		if code, body, _ := tf.do("PUT", "/v1/tenants/b/quota", q); code != http.StatusOK {
			t.Fatalf("quota %s: %d %s", q, code, body)
		}
	}
	quotaErr := func(what string, err error, limit string) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrQuota) || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s: %v; want a quota error naming %q", what, err, limit)
		}
	}
	run := func(name string) error {
		_, err := b.Create(ctx, sandbox.CreateOptions{Name: name, Start: true, Config: sandbox.Config{TTL: time.Hour, Limits: sandbox.Limits{Memory: 256 << 20}}})
		return err
	}
	// Values out of range are refused with the field's name, on add too.
	for _, c := range []struct{ method, path, body, field string }{
		{"PUT", "/v1/tenants/b/quota", `{"cpus":1e308}`, "cpus"},
		{"PUT", "/v1/tenants/b/quota", `{"memory":-1}`, "memory"},
		{"PUT", "/v1/tenants/b/quota", `{"sandboxes":1000001}`, "sandboxes"},
		{"POST", "/v1/tenants", `{"name":"c","quota":{"snapshot_bytes":1000000000000000000}}`, "snapshot_bytes"},
	} {
		code, body, _ := tf.do(c.method, c.path, c.body)
		if e := apiError(t, body); code != http.StatusBadRequest || e.Field != c.field || !strings.Contains(e.Message, "out of range") {
			t.Errorf("%s %s %s: %d %s, want 400 naming %q", c.method, c.path, c.body, code, body, c.field)
		}
	}
	setQuota(`{"sandboxes":1}`)
	if err := run("q1"); err != nil {
		t.Fatal(err)
	}
	quotaErr("second sandbox", run("q2"), "1 concurrent sandboxes")
	// The native API's answer: 409 with class quota (its table).
	code, body := tf.as("b", "POST", "/v1/sandboxes", `{"name":"q3"}`)
	if e := apiError(t, []byte(body)); code != http.StatusConflict || e.Class != "quota" {
		t.Errorf("over quota: %d %s", code, body)
	}
	// A fork of N counts N.
	setQuota(`{"sandboxes":2}`)
	_, err := b.Fork(ctx, "q1", sandbox.ForkOptions{N: 2})
	quotaErr("fork of 2 with room for 1", err, "2 concurrent sandboxes (1 held, 2 more asked)")
	// Memory sums the sandboxes' limits.
	setQuota(`{"memory":536870912}`)
	if err := run("q4"); err != nil {
		t.Fatalf("256m more under a 512m quota: %v", err)
	}
	quotaErr("third 256m sandbox", run("q5"), "512MiB of memory")
	setQuota(`{"cpus":2}`)
	quotaErr("a third vCPU", run("q6"), "2 vCPUs")
	// Stopped sandboxes hold nothing.
	if _, err := b.Stop(ctx, "q4", 0); err != nil {
		t.Fatal(err)
	}
	if err := run("q7"); err != nil {
		t.Fatalf("after a stop: %v", err)
	}
	// Snapshot bytes: refused once held.
	setQuota(`{"snapshot_bytes":1}`)
	if _, err := b.Checkpoint(ctx, "q1", sandbox.CheckpointOptions{}); err != nil {
		t.Fatalf("first checkpoint: %v", err)
	}
	_, err = b.Checkpoint(ctx, "q1", sandbox.CheckpointOptions{})
	quotaErr("second checkpoint", err, "of snapshots")
	setQuota(`{"pools":1}`)
	if _, err := b.CreatePool(ctx, api.PoolRequest{Name: "p1", Size: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = b.CreatePool(ctx, api.PoolRequest{Name: "p2", Size: 1})
	quotaErr("second pool", err, "1 pools")
	// Creates per minute count attempts of the last minute.
	setQuota(`{"creates_per_minute":1}`)
	quotaErr("create over the rate", run("q8"), "1 creates per minute")
	// The admin has no quota.
	if _, err := tf.c.Create(ctx, sandbox.CreateOptions{Name: "admin-box", Start: true, Config: sandbox.Config{TTL: time.Hour}}); err != nil {
		t.Fatalf("admin: %v", err)
	}
}

// TestTenantUsage accounts a tenant's sandbox: running time, CPU and
// memory grow while it runs and not while it is paused, they are in the
// state database (what a restarted server reads), and each key sees only
// its own.
func TestTenantUsage(t *testing.T) {
	tf := newTenantFixture(t)
	ctx := context.Background()
	b := tf.clients["b"]
	m := tf.env.Manager
	if _, err := b.Create(ctx, sandbox.CreateOptions{Name: "u1", Start: true, Config: sandbox.Config{TTL: time.Hour, Limits: sandbox.Limits{Memory: 256 << 20}}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Account(ctx); err != nil {
		t.Fatal(err)
	}
	busy := sandbox.Process{Args: []string{"sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"}}
	if exit, err := b.Exec(ctx, "u1", busy, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		t.Fatalf("busy loop: %+v %v", exit, err)
	}
	time.Sleep(time.Second)
	usage := func(key string) sandbox.Usage {
		t.Helper()
		if err := m.Account(ctx); err != nil {
			t.Fatal(err)
		}
		code, body := tf.as(key, "GET", "/v1/usage?since=1h", "")
		var us []sandbox.Usage
		if code != http.StatusOK || json.Unmarshal([]byte(body), &us) != nil {
			t.Fatalf("usage: %d %s", code, body)
		}
		for _, u := range us {
			if u.Tenant != key {
				t.Fatalf("%s's key sees %+v", key, u)
			}
		}
		if len(us) == 0 {
			return sandbox.Usage{Tenant: key}
		}
		return us[0]
	}
	u1 := usage("b")
	if u1.SandboxSeconds < 1 || u1.CPUSeconds <= 0.01 || u1.MemoryGiBSeconds < u1.SandboxSeconds/4*0.99 || u1.MemoryGiBSeconds > u1.SandboxSeconds/4*1.01 {
		t.Fatalf("after a busy second: %+v", u1)
	}
	if a := usage("a"); a.SandboxSeconds != 0 {
		t.Fatalf("a used nothing, but: %+v", a)
	}
	if _, err := b.Pause(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	paused := usage("b")
	time.Sleep(2 * time.Second)
	if u := usage("b"); u.SandboxSeconds != paused.SandboxSeconds || u.CPUSeconds != paused.CPUSeconds {
		t.Fatalf("paused, usage grew from %+v to %+v", paused, u)
	}
	resumed := time.Now()
	if _, err := b.Resume(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	// Running time since the resume began, no more (the pause excluded).
	if u := usage("b"); u.SandboxSeconds < paused.SandboxSeconds+0.9 || u.SandboxSeconds > paused.SandboxSeconds+time.Since(resumed).Seconds()+0.05 {
		t.Fatalf("%s after resume: %+v (paused at %+v)", time.Since(resumed), u, paused)
	}
	// The admin sees it by sandbox; Prometheus has it by tenant.
	code, body := tf.as("b", "GET", "/v1/usage?by=sandbox&since=bad", "")
	if code != http.StatusBadRequest {
		t.Errorf("since=bad: %d %s", code, body)
	}
	status, raw, _ := tf.do("GET", "/v1/usage?by=sandbox", "")
	if status != http.StatusOK || !strings.Contains(string(raw), `"sandbox":"`) || !strings.Contains(string(raw), `"tenant":"b"`) {
		t.Errorf("admin by sandbox: %d %s", status, raw)
	}
	status, raw, _ = tf.do("GET", "/metrics", "")
	if status != http.StatusOK || !strings.Contains(string(raw), `smolvm_tenant_sandbox_seconds_total{tenant="b"}`) {
		t.Errorf("metrics lack tenant usage: %d", status)
	}
	// Durable: a fresh manager over the data dir (a restarted server)
	// reads the same totals.
	m2, err := manager.Open(ctx, manager.Config{DataDir: tf.env.Dir, Backends: testdeps.Backends(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	before := usage("b")
	us, err := m2.Usage(ctx, time.Now().Add(-time.Hour), "b", sandbox.UsageByTenant)
	if err != nil || len(us) != 1 || us[0].SandboxSeconds != before.SandboxSeconds {
		t.Fatalf("after reopening: %+v %v, want %+v", us, err, before)
	}
}

// TestTenantErrorsNameNoOthers sends every route, with another tenant's
// (and the admin's) names and IDs in its parameters and bodies, under a
// tenant's key, and holds that no answer names an object of someone else
// that the request did not name itself. A hot pool the admin made of a
// tenant's snapshot is the admin's: the tenant's restore does not claim
// its copies, and its snapshot rm does not name it.
func TestTenantErrorsNameNoOthers(t *testing.T) {
	tf := newTenantFixture(t)
	ctx := context.Background()
	a := tf.clients["a"]
	box, err := a.Create(ctx, sandbox.CreateOptions{Name: "a-box", Start: true, Config: sandbox.Config{TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Checkpoint(ctx, "a-box", sandbox.CheckpointOptions{Name: "a-snap"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreatePool(ctx, api.PoolRequest{Name: "a-pool", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.c.CreatePool(ctx, api.PoolRequest{Name: "adm-hot", From: snap.ID, Hot: 1}); err != nil {
		t.Fatal(err)
	}
	if p, err := tf.c.FillPool(ctx, "adm-hot"); err != nil || p.HotReady != 1 {
		t.Fatalf("admin's hot pool: %+v %v", p, err)
	}

	// a's restore makes a copy of its own; the admin's stays waiting.
	sb, err := a.Restore(ctx, "a-snap", sandbox.RestoreOptions{Name: "a-copy"})
	if err != nil || sb.Tenant != "a" {
		t.Fatalf("a's restore with the admin's hot pool there: %+v %v", sb, err)
	}
	if ps, err := tf.c.Pools(ctx); err != nil || len(ps) != 2 || ps[1].Name != "adm-hot" || ps[1].HotReady != 1 {
		t.Fatalf("a's restore took the admin's hot copy: %+v %v", ps, err)
	}

	secrets := map[string][]string{
		"a": {"adm-hot"},
		"b": {"adm-hot", "a-box", box.ID, box.ID[:12], "a-snap", snap.ID, snap.ID[:12], "a-pool", "a-copy", sb.ID},
	}
	values := map[string][]string{
		"id":       {"a-box", box.ID, box.ID[:8], "a-copy"},
		"snapshot": {"a-snap", snap.ID, snap.ID[:12]},
		"pool":     {"a-pool", "adm-hot"},
		"tenant":   {"a"},
		"key":      {tf.keyIDs["a"]},
		"port":     {"8080"},
	}
	hc := &http.Client{Timeout: 3 * time.Second} // event streams stop here
	send := func(who, method, path, body string) {
		t.Helper()
		req, err := http.NewRequest(method, tf.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tf.keys[who])
		resp, err := hc.Do(req)
		if err != nil {
			return // a stream that timed out sent nothing in the time
		}
		got, _ := io.ReadAll(resp.Body) // what came before a timeout too
		resp.Body.Close()
		for _, s := range secrets[who] {
			if strings.Contains(string(got), s) && !strings.Contains(path+body, s) {
				t.Errorf("%s: %s %s %s: answer names %q: %d %s", who, method, path, body, s, resp.StatusCode, got)
			}
		}
	}
	for _, who := range []string{"b", "a"} {
		for _, p := range tf.srv.Routes() {
			method, tmpl, ok := strings.Cut(p, " ")
			if !ok || strings.HasPrefix(tmpl, "/v1/browsers") || method == "POST" && !strings.Contains(tmpl, "{") {
				continue // browsers start Chromium; creates are below
			}
			body := "{}"
			if strings.HasSuffix(tmpl, "/files") {
				body = "x"
			}
			paths := []string{tmpl}
			for _, wc := range httpguard.Wildcards(p) {
				var next []string
				for _, path := range paths {
					for _, v := range values[wc] {
						next = append(next, strings.ReplaceAll(path, "{"+wc+"}", v))
					}
				}
				paths = next
			}
			for _, path := range paths {
				if who == "a" && !strings.Contains(path, "adm-hot") && path != tmpl {
					continue // a's own objects
				}
				if strings.HasSuffix(path, "/files") {
					path += "?path=/tmp/x"
				}
				send(who, method, path, body)
			}
		}
		for _, r := range []struct{ path, body string }{
			{"/v1/sandboxes", `{"name":"a-box"}`},
			{"/v1/sandboxes", `{"pool":"a-pool"}`},
			{"/v1/sandboxes", `{"pool":"adm-hot"}`},
			{"/v1/pools", `{"name":"a-pool","size":1}`},
			{"/v1/pools", `{"name":"adm-hot","size":1}`},
			{"/v1/pools", `{"name":"bp","from":"a-snap","hot":1}`},
			{"/v1/pools", `{"name":"bp","from":"` + snap.ID + `","hot":1}`},
			{"/v1/snapshots/a-snap/restore", `{"name":"a-box"}`},
		} {
			send(who, "POST", r.path, r.body)
		}
	}
	// a's snapshot rm is refused, without the admin's pool's name.
	code, body := tf.as("a", "DELETE", "/v1/snapshots/a-snap", "")
	if code < 400 || strings.Contains(body, "adm-hot") {
		t.Errorf("a's snapshot rm with the admin's hot pool: %d %s", code, body)
	}
}

// TestTenantAs: the admin token acts as an existing tenant named in
// Smolvm-Tenant (client.As), with exactly that tenant's view and
// ownership; a tenant's own key cannot use the header to be another.
func TestTenantAs(t *testing.T) {
	tf := withTenants(t, newFakeFixture(t, nil))
	ctx := context.Background()
	asA := tf.c.As("a")
	sb, err := asA.Create(ctx, sandbox.CreateOptions{Name: "made-as-a", Start: true, Config: sandbox.Config{TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Tenant != "a" {
		t.Fatalf("a sandbox made as a is %q's", sb.Tenant)
	}
	if _, err := tf.clients["a"].Get(ctx, "made-as-a"); err != nil {
		t.Fatalf("a's own key does not see it: %v", err)
	}
	if _, err := tf.c.As("b").Get(ctx, "made-as-a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("acting as b: %v, want not found", err)
	}
	snap, err := asA.Checkpoint(ctx, "made-as-a", sandbox.CheckpointOptions{})
	if err != nil || snap.Tenant != "a" {
		t.Fatalf("checkpoint as a: %v %+v", err, snap)
	}
	if _, err := tf.c.As("b").Restore(ctx, snap.ID, sandbox.RestoreOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore of a's snapshot as b: %v, want not found", err)
	}
	if _, err := tf.c.As("nosuch").List(ctx); err == nil || !strings.Contains(err.Error(), api.HeaderTenant) {
		t.Fatalf("acting as a tenant that does not exist: %v", err)
	}
	// Admin routes stay the admin's.
	if code, _, _ := tf.do("GET", "/v1/tenants", "", api.HeaderTenant, "a"); code != http.StatusForbidden {
		t.Fatalf("GET /v1/tenants acting as a: %d, want 403", code)
	}
	// A tenant's key with the header is still that tenant.
	if code, body, _ := tf.do("GET", "/v1/sandboxes/made-as-a", "", "Authorization", "Bearer "+tf.keys["b"], api.HeaderTenant, "a"); code != http.StatusNotFound {
		t.Fatalf("b's key naming a: %d %s, want 404", code, body)
	}
	if err := tf.c.Remove(ctx, "made-as-a", true); err != nil {
		t.Fatal(err)
	}
}

// TestTenantCredentialsDisagree sends requests carrying two credentials:
// when they differ (a valid key beside a wrong one, one tenant's beside
// another's or the admin's) the request names no one principal and is
// refused, whichever header would be read first.
func TestTenantCredentialsDisagree(t *testing.T) {
	tf := withTenants(t, newFakeFixture(t, nil))
	a, b := tf.keys["a"], tf.keys["b"]
	send := func(hdr http.Header) (int, string) {
		req := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		req.Header = hdr
		w := httptest.NewRecorder()
		tf.srv.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	for _, hdr := range []http.Header{
		{"Authorization": {"Bearer " + a}, "X-Api-Key": {"wrong"}},
		{"Authorization": {"Bearer wrong"}, "X-Api-Key": {a}},
		{"Authorization": {"Bearer " + a}, "X-Api-Key": {b}},
		{"Authorization": {"Bearer " + token}, "X-Api-Key": {a}},
		{"Authorization": {"Bearer " + token}, "X-Api-Key": {"wrong"}},
		{"X-Api-Key": {a, "wrong"}},
		{"Authorization": {"Bearer " + a, "Bearer " + b}},
	} {
		if code, body := send(hdr); code != http.StatusUnauthorized {
			t.Errorf("%v: %d %s, want 401", hdr, code, body)
		}
	}
	// Credentials that agree are one principal; Basic is no API key.
	for _, hdr := range []http.Header{
		{"Authorization": {"Bearer " + a}, "X-Api-Key": {a}},
		{"X-Api-Key": {a, a}},
		{"Authorization": {"Basic dXNlcjo="}, "X-Api-Key": {a}},
		{"Authorization": {"Bearer " + token}},
	} {
		if code, body := send(hdr); code != http.StatusOK {
			t.Errorf("%v: %d %s, want 200", hdr, code, body)
		}
	}
}
