package e2b

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// accessFixture is a real smolvm serve with tenants a and b: a running
// sandbox of each, one of a's removed, and a member of a's warm pool.
type accessFixture struct {
	t          *testing.T
	s          *server
	base       string       // the server's root URL
	hc         *http.Client // sends every request to the server, whatever the host
	keyA, keyB string
	live, gone sandboxJSON // a's
	theirs     sandboxJSON // b's
	member     struct{ id, name string }
}

func newAccessFixture(t *testing.T) *accessFixture {
	s := smolvmServe(t)
	f := &accessFixture{t: t, s: s, base: strings.TrimSuffix(s.URL, "/e2b")}
	f.hc = dialsOnly(f.base)
	f.keyA, f.keyB = s.addTenant(t, "a"), s.addTenant(t, "b")
	f.live, f.gone, f.theirs = f.create(f.keyA), f.create(f.keyA), f.create(f.keyB)
	if code, body := f.send("DELETE", "/e2b/sandboxes/"+f.gone.SandboxID, "", http.Header{"X-API-KEY": {f.keyA}}); code != http.StatusNoContent {
		t.Fatalf("kill: %d %s", code, body)
	}
	if code, body := f.send("POST", "/v1/pools", `{"name":"a-pool","size":1,"fill":true}`, http.Header{"X-API-KEY": {f.keyA}}); code != http.StatusCreated {
		t.Fatalf("pool: %d %s", code, body)
	}
	err := s.env.Store.DB().QueryRow(`SELECT id, name FROM sandboxes WHERE pool = 'a-pool'`).Scan(&f.member.id, &f.member.name)
	if err != nil {
		t.Fatalf("the pool's member: %v", err)
	}
	return f
}

// create makes a sandbox through E2B's API with key.
func (f *accessFixture) create(key string) sandboxJSON {
	f.t.Helper()
	code, body := f.send("POST", "/e2b/sandboxes", `{"templateID":"base","timeout":300}`, http.Header{"X-API-KEY": {key}, "Content-Type": {"application/json"}})
	var sb sandboxJSON
	if code != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		f.t.Fatalf("create: %d %s", code, body)
	}
	return sb
}

// send sends a request to path on the server with hdr (every value).
func (f *accessFixture) send(method, path, body string, hdr http.Header) (int, []byte) {
	f.t.Helper()
	a := f.answer(f.request(method, f.base+path, body), hdr)
	return a.status, []byte(a.body)
}

func (f *accessFixture) request(method, url, body string) *http.Request {
	f.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	return req
}

// seen is what a request got: its status, headers (but the date) and
// body.
type seen struct {
	status int
	header string
	body   string
}

// answer sends req with hdr added.
func (f *accessFixture) answer(req *http.Request, hdr http.Header) seen {
	f.t.Helper()
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, b := exchange(f.t, f.hc, req)
	resp.Header.Del("Date")
	var h bytes.Buffer
	resp.Header.Write(&h)
	return seen{resp.StatusCode, h.String(), string(b)}
}

// absent returns n hex digits that begin no sandbox ID, live or removed.
func (f *accessFixture) absent(n int) string {
	f.t.Helper()
	for _, c := range "0123456789abcdef" {
		ref := strings.Repeat(string(c), n)
		var found int
		err := f.s.env.Store.DB().QueryRow(`SELECT count(*) FROM (SELECT id FROM sandboxes UNION SELECT id FROM sandbox_tombstones) WHERE id LIKE ?`, ref+"%").Scan(&found)
		if err != nil {
			f.t.Fatal(err)
		}
		if found == 0 {
			return ref
		}
	}
	f.t.Fatal("every digit begins an ID")
	return ""
}

// TestSandboxAccess checks who reaches a sandbox, and that those who may
// not learn nothing of it, on a real smolvm serve with two tenants.
func TestSandboxAccess(t *testing.T) {
	f := newAccessFixture(t)
	junk := strings.Repeat("0", 32)

	// Every kind of request that names a sandbox: its ports by Host and
	// by E2B's headers, envd's HTTP routes and RPCs (unary and
	// streaming), E2B's control plane and the native API.
	e2b := f.base + "/e2b"
	envd := func(method, path, ctype, body string) func(string) *http.Request {
		return func(ref string) *http.Request {
			req := f.request(method, e2b+path, body)
			req.Header.Set(headerSandboxID, ref)
			req.Header.Set("Content-Type", ctype)
			return req
		}
	}
	at := func(method, url, body string) func(string) *http.Request {
		return func(ref string) *http.Request { return f.request(method, strings.ReplaceAll(url, "REF", ref), body) }
	}
	portByHost := at("GET", "http://8000-REF."+testDomain+"/", "")
	portByHeader := func(ref string) *http.Request {
		req := envd("GET", "/x", "text/plain", "")(ref)
		req.Header.Set(headerSandboxPort, "8000")
		return req
	}
	readFile := envd("GET", "/files?path=/etc/passwd", "text/plain", "")
	stat := envd("POST", "/filesystem.Filesystem/Stat", "application/json", `{"path":"/"}`)
	start := `{"process":{"cmd":"/bin/true"}}`
	routes := []struct {
		what string
		req  func(ref string) *http.Request
	}{
		{"port by Host", portByHost},
		{"port by header", portByHeader},
		{"envd GET /files", readFile},
		{"envd POST /files", envd("POST", "/files?path=/tmp/x", "application/octet-stream", "x")},
		{"envd /health", envd("GET", "/health", "text/plain", "")},
		{"envd unary RPC", stat},
		{"envd streaming RPC", envd("POST", "/process.Process/Start", "application/connect+json", string(append([]byte{0, 0, 0, 0, byte(len(start))}, start...)))},
		{"E2B getInfo", at("GET", e2b+"/sandboxes/REF", "")},
		{"E2B connect", at("POST", e2b+"/sandboxes/REF/connect", "{}")},
		{"native get", at("GET", f.base+"/v1/sandboxes/REF", "")},
		{"native port", at("GET", f.base+"/v1/sandboxes/REF/ports/8000/", "")},
		{"native exec", at("POST", f.base+"/v1/sandboxes/REF/exec", `{"args":["true"]}`)},
	}

	t.Run("learns nothing", func(t *testing.T) {
		// Callers who may not open a's sandboxes.
		callers := []struct {
			what string
			hdr  http.Header
		}{
			{"no credentials", nil},
			{"junk tokens", http.Header{headerAccessToken: {junk}, headerTrafficToken: {junk}}},
			{"another sandbox's tokens", http.Header{headerAccessToken: {f.theirs.EnvdAccessToken}, headerTrafficToken: {f.theirs.TrafficAccessToken}}},
			{"a junk key", http.Header{"X-API-KEY": {junk}}},
			{"another tenant's key", http.Header{"X-API-KEY": {f.keyB}}},
			{"another tenant's bearer key", http.Header{"Authorization": {"Bearer " + f.keyB}}},
			{"another tenant's key and sandbox's tokens", http.Header{"X-API-KEY": {f.keyB}, headerTrafficToken: {f.theirs.TrafficAccessToken}}},
		}
		id, prefix := f.absent(12), f.absent(4)
		// a's sandboxes, each beside a missing one of its shape.
		targets := []struct{ what, ref, missing string }{
			{"a running sandbox's ID", f.live.SandboxID, id},
			{"a running sandbox's prefix", f.live.SandboxID[:4], prefix},
			{"a running sandbox's name", f.live.Alias, strings.ReplaceAll(f.live.Alias, f.live.SandboxID, id)},
			{"a removed sandbox's ID", f.gone.SandboxID, id},
			{"a removed sandbox's prefix", f.gone.SandboxID[:4], prefix},
			{"a pool member's ID", f.member.id, id},
			{"a pool member's prefix", f.member.id[:4], prefix},
			{"a pool member's name", f.member.name, strings.Repeat("z", len(f.member.name))},
		}
		for _, r := range routes {
			for _, c := range callers {
				for _, tg := range targets {
					got := f.answer(r.req(tg.ref), c.hdr)
					want := f.answer(r.req(tg.missing), c.hdr)
					// The ref sent may come back; nothing else may differ.
					alike := strings.ReplaceAll(got.body, tg.ref, tg.missing)
					if got.status != want.status || got.header != want.header || (got.body != want.body && alike != want.body) {
						t.Errorf("%s, %s, %s: %d %s\n%s\nwhile a missing one gets %d %s\n%s", r.what, c.what, tg.what, got.status, got.body, got.header, want.status, want.body, want.header)
					}
				}
			}
		}
	})

	t.Run("credentials disagree", func(t *testing.T) {
		live, traffic, tok := f.live.SandboxID, f.live.TrafficAccessToken, f.live.EnvdAccessToken
		e2bList, nativeList := at("GET", e2b+"/v2/sandboxes", ""), at("GET", f.base+"/v1/sandboxes", "")
		type check struct {
			what string
			req  func(string) *http.Request
			hdr  http.Header
		}
		// Credentials that hold and agree get in. Nothing listens on the
		// sandbox's port 8000: 502 once in.
		for _, c := range []struct {
			check
			status int
		}{
			{check{"E2B: a's key", e2bList, http.Header{"X-API-KEY": {f.keyA}}}, 200},
			{check{"E2B: a's key as both headers", e2bList, http.Header{"X-API-KEY": {f.keyA}, "Authorization": {"Bearer " + f.keyA}}}, 200},
			// Basic is no API key: the e2b SDK names envd's user in it.
			{check{"E2B: a's key and Basic", e2bList, http.Header{"X-API-KEY": {f.keyA}, "Authorization": {"Basic dXNlcjo="}}}, 200},
			{check{"native: a's key", nativeList, http.Header{"Authorization": {"Bearer " + f.keyA}}}, 200},
			{check{"port: the traffic token", portByHost, http.Header{headerTrafficToken: {traffic}}}, 502},
			{check{"port: the traffic and envd tokens", portByHost, http.Header{headerTrafficToken: {traffic}, headerAccessToken: {tok}}}, 502},
			{check{"port: the traffic token and a's key", portByHost, http.Header{headerTrafficToken: {traffic}, "X-API-KEY": {f.keyA}}}, 502},
			{check{"port: the traffic token, by header", portByHeader, http.Header{headerTrafficToken: {traffic}}}, 502},
			{check{"envd: the token", stat, http.Header{headerAccessToken: {tok}}}, 200},
		} {
			if got := f.answer(c.req(live), c.hdr); got.status != c.status {
				t.Errorf("%s: %d %s, want %d", c.what, got.status, got.body, c.status)
			}
		}
		// The same with a wrong credential beside, or another principal's.
		for _, c := range []check{
			{"E2B: a's key and b's", e2bList, http.Header{"X-API-KEY": {f.keyA}, "Authorization": {"Bearer " + f.keyB}}},
			{"E2B: a's key and a wrong bearer", e2bList, http.Header{"X-API-KEY": {f.keyA}, "Authorization": {"Bearer " + junk}}},
			{"E2B: a's key twice, once wrong", e2bList, http.Header{"X-API-KEY": {f.keyA, junk}}},
			{"native: a's bearer and b's key", nativeList, http.Header{"Authorization": {"Bearer " + f.keyA}, "X-API-KEY": {f.keyB}}},
			{"native: the admin's bearer and a wrong key", nativeList, http.Header{"Authorization": {"Bearer " + f.s.Key}, "X-API-KEY": {junk}}},
			{"native: a's bearer twice, once wrong", nativeList, http.Header{"Authorization": {"Bearer " + f.keyA, "Bearer " + junk}}},
			{"port: the traffic token and a wrong key", portByHost, http.Header{headerTrafficToken: {traffic}, "X-API-KEY": {junk}}},
			{"port: the traffic token and b's key", portByHost, http.Header{headerTrafficToken: {traffic}, "X-API-KEY": {f.keyB}}},
			{"port: the traffic token and a wrong envd token", portByHost, http.Header{headerTrafficToken: {traffic}, headerAccessToken: {junk}}},
			{"port: the traffic token twice, once wrong", portByHeader, http.Header{headerTrafficToken: {traffic, junk}}},
			{"port: a's traffic token and b's sandbox's", portByHeader, http.Header{headerTrafficToken: {traffic, f.theirs.TrafficAccessToken}}},
			{"envd: the token twice, once wrong", stat, http.Header{headerAccessToken: {tok, junk}}},
		} {
			if got := f.answer(c.req(live), c.hdr); got.status != http.StatusUnauthorized {
				t.Errorf("%s: %d %s, want 401", c.what, got.status, got.body)
			}
		}
	})

	t.Run("an ID before a name spelled like it", func(t *testing.T) {
		// b names a sandbox like a's running sandbox's ID: that ID, its
		// token and the admin still reach a's.
		body := `{"name":"` + f.live.SandboxID + `","start":false}`
		if code, b := f.send("POST", "/v1/sandboxes", body, http.Header{"X-API-KEY": {f.keyB}}); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", body, code, b)
		}
		got := f.answer(stat(f.live.SandboxID), http.Header{headerAccessToken: {f.live.EnvdAccessToken}})
		if got.status != 200 {
			t.Errorf("envd by a's token: %d %s", got.status, got.body)
		}
		code, b := f.send("GET", "/v1/sandboxes/"+f.live.SandboxID, "", http.Header{"Authorization": {"Bearer " + f.s.Key}})
		var sb struct{ ID string }
		if json.Unmarshal(b, &sb); code != 200 || sb.ID != f.live.SandboxID {
			t.Errorf("the admin's get of a's ID: %d %s", code, b)
		}
	})
}
