package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

const admin = "admin-token"

// world is a console over a real state database, served over real HTTP
// beside a probe route that admits requests as httpapi does with
// Options.Session, answering the principal.
type world struct {
	dir     string
	st      *store.Store
	tenants *tenant.Store
	srv     *httptest.Server
}

func newWorld(t *testing.T, tls bool, o Options) *world {
	t.Helper()
	w := &world{dir: t.TempDir()}
	w.open(t, tls, o)
	return w
}

// open (re)opens the database and the console over w.dir, as a restart
// of smolvm serve does.
func (w *world) open(t *testing.T, tls bool, o Options) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, err := tenant.Open(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	o.Store, o.ResolveKey = st, ts.ResolveKey
	if o.Token == "" {
		o.Token = admin
	}
	c, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, c)
	mux.HandleFunc("/probe", func(rw http.ResponseWriter, r *http.Request) {
		r, ok, err := c.Admit(r)
		switch {
		case errors.Is(err, ErrCSRF):
			http.Error(rw, err.Error(), http.StatusForbidden)
		case err != nil:
			http.Error(rw, err.Error(), http.StatusInternalServerError)
		case !ok:
			http.Error(rw, "no session", http.StatusUnauthorized)
		default:
			name, _ := tenant.Of(r.Context())
			io.WriteString(rw, "as:"+name)
		}
	})
	if tls {
		w.srv = httptest.NewTLSServer(mux)
	} else {
		w.srv = httptest.NewServer(mux)
	}
	t.Cleanup(w.srv.Close)
	w.st, w.tenants = st, ts
}

// browser is a client with a cookie jar, as a browser keeps cookies.
func (w *world) browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: w.srv.Client().Transport, Jar: jar}
}

func do(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

// signIn signs c in with key and returns the session it got.
func (w *world) signIn(t *testing.T, c *http.Client, key string) Session {
	t.Helper()
	code, body, _ := do(t, c, "POST", w.srv.URL+"/ui/session", `{"key":"`+key+`"}`, nil)
	if code != http.StatusOK {
		t.Fatalf("sign-in: %d %s", code, body)
	}
	var s Session
	if err := json.Unmarshal([]byte(body), &s); err != nil || !s.SignedIn || s.CSRF == "" {
		t.Fatalf("sign-in answered %s (%v)", body, err)
	}
	return s
}

func TestSessionCookie(t *testing.T) {
	for _, tls := range []bool{false, true} {
		w := newWorld(t, tls, Options{})
		_, _, resp := do(t, w.browser(t), "POST", w.srv.URL+"/ui/session", `{"key":"`+admin+`"}`, nil)
		cks := resp.Cookies()
		if len(cks) != 1 || cks[0].Name != CookieName {
			t.Fatalf("cookies %v, want one %s", cks, CookieName)
		}
		ck := cks[0]
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure != tls || ck.MaxAge != int(DefaultTTL/time.Second) {
			t.Errorf("tls %v: cookie %+v: want HttpOnly, SameSite=Strict, Path=/, Secure only under TLS, Max-Age of the TTL", tls, ck)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != Policy {
			t.Errorf("Content-Security-Policy %q", got)
		}
	}
}

func TestSignInRefused(t *testing.T) {
	w := newWorld(t, false, Options{})
	c := w.browser(t)
	for _, tc := range []struct {
		body, typ string
		code      int
	}{
		{`{"key":"wrong"}`, "application/json", http.StatusUnauthorized},
		{`{"key":"smk_` + strings.Repeat("0", 64) + `"}`, "application/json", http.StatusUnauthorized},
		{`{}`, "application/json", http.StatusBadRequest},
		{`not json`, "application/json", http.StatusBadRequest},
		// A form is what another site's page can post without a preflight.
		{`key=` + admin, "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
	} {
		code, body, resp := do(t, c, "POST", w.srv.URL+"/ui/session", tc.body, map[string]string{"Content-Type": tc.typ})
		if code != tc.code || len(resp.Cookies()) != 0 {
			t.Errorf("sign-in with %s (%s): %d %s, cookies %v; want %d and no cookie", tc.body, tc.typ, code, body, resp.Cookies(), tc.code)
		}
	}
	if code, body, _ := do(t, c, "GET", w.srv.URL+"/probe", "", nil); code != http.StatusUnauthorized {
		t.Errorf("after refused sign-ins: %d %s", code, body)
	}
}

func TestCSRF(t *testing.T) {
	w := newWorld(t, false, Options{})
	c := w.browser(t)
	s := w.signIn(t, c, admin)
	probe := w.srv.URL + "/probe"
	for _, tc := range []struct {
		method string
		hdr    map[string]string
		url    string
		code   int
	}{
		{"GET", nil, probe, http.StatusOK},
		{"POST", nil, probe, http.StatusForbidden},
		{"DELETE", nil, probe, http.StatusForbidden},
		{"POST", map[string]string{CSRFHeader: wrong(s.CSRF)}, probe, http.StatusForbidden},
		{"POST", map[string]string{CSRFHeader: s.CSRF}, probe, http.StatusOK},
		// A WebSocket's upgrade is a GET that acts: the token rides in its URL.
		{"GET", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, probe, http.StatusForbidden},
		{"GET", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", CSRFHeader: s.CSRF}, probe, http.StatusForbidden},
		{"GET", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, probe + "?csrf=" + s.CSRF, http.StatusOK},
	} {
		if code, body, _ := do(t, c, tc.method, tc.url, "", tc.hdr); code != tc.code {
			t.Errorf("%s %s %v: %d %s, want %d", tc.method, tc.url, tc.hdr, code, body, tc.code)
		}
	}
	// Sign-out is an action too.
	if code, _, _ := do(t, c, "DELETE", w.srv.URL+"/ui/session", "", nil); code != http.StatusForbidden {
		t.Errorf("sign-out without the token: %d, want 403", code)
	}
	if code, _, _ := do(t, c, "GET", probe, "", nil); code != http.StatusOK {
		t.Errorf("after a refused sign-out the session is gone: %d", code)
	}
	if code, _, _ := do(t, c, "DELETE", w.srv.URL+"/ui/session", "", map[string]string{CSRFHeader: s.CSRF}); code != http.StatusNoContent {
		t.Errorf("sign-out: %d, want 204", code)
	}
	if code, _, _ := do(t, c, "GET", probe, "", nil); code != http.StatusUnauthorized {
		t.Errorf("after sign-out: %d, want 401", code)
	}
}

// TestSessionLifetime: a session survives a restart, ends at its expiry,
// with its key's revocation, and when the admin token changes.
func TestSessionLifetime(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, false, Options{})
	if _, err := w.tenants.Add(ctx, "a", sandbox.Quota{}); err != nil {
		t.Fatal(err)
	}
	k, key, err := w.tenants.AddKey(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	ca, cadm := w.browser(t), w.browser(t)
	w.signIn(t, ca, key)
	w.signIn(t, cadm, admin)
	probe := func(c *http.Client) string {
		_, body, _ := do(t, c, "GET", w.srv.URL+"/probe", "", nil)
		return strings.TrimSpace(body)
	}
	if got := probe(ca); got != "as:a" {
		t.Errorf("tenant session: %q, want as:a", got)
	}
	if got := probe(cadm); got != "as:" {
		t.Errorf("admin session: %q, want as: (unscoped)", got)
	}

	// A restart over the same data dir: the cookies still work.
	old := w.srv.URL
	w.open(t, false, Options{})
	for _, c := range []*http.Client{ca, cadm} {
		c.Jar.SetCookies(mustURL(t, w.srv.URL), c.Jar.Cookies(mustURL(t, old)))
	}
	if got := probe(ca); got != "as:a" {
		t.Errorf("tenant session after a restart: %q", got)
	}

	if err := w.tenants.RemoveKey(ctx, "a", k.ID); err != nil {
		t.Fatal(err)
	}
	if got := probe(ca); got != "no session" {
		t.Errorf("after the key's revocation: %q, want no session", got)
	}
	// Another admin token (the token file replaced): the old admin's
	// sessions are no one's.
	w.open(t, false, Options{Token: "another-token"})
	cadm.Jar.SetCookies(mustURL(t, w.srv.URL), cadm.Jar.Cookies(mustURL(t, old)))
	if got := probe(cadm); got != "no session" {
		t.Errorf("after the admin token changed: %q, want no session", got)
	}

	short := newWorld(t, false, Options{TTL: 200 * time.Millisecond})
	c := short.browser(t)
	short.signIn(t, c, admin)
	time.Sleep(300 * time.Millisecond)
	if _, body, _ := do(t, c, "GET", short.srv.URL+"/probe", "", nil); strings.TrimSpace(body) != "no session" {
		t.Errorf("after the TTL: %q, want no session", body)
	}
	short.signIn(t, short.browser(t), admin)
	var n int
	if err := short.st.DB().QueryRow(`SELECT COUNT(*) FROM console_sessions`).Scan(&n); err != nil || n != 1 {
		t.Errorf("sessions kept after a sign-in swept the expired: %d (%v), want 1", n, err)
	}
}

func TestAssets(t *testing.T) {
	w := newWorld(t, false, Options{})
	c := w.srv.Client()
	for path, typ := range map[string]string{"/ui/": "text/html", "/ui/sandboxes/abc": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css", "/ui/vendor/xterm.js": "text/javascript"} {
		code, body, resp := do(t, c, "GET", w.srv.URL+path, "", nil)
		if code != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) || body == "" {
			t.Errorf("GET %s: %d %s", path, code, resp.Header.Get("Content-Type"))
		}
		if resp.Header.Get("Content-Security-Policy") != Policy || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
		etag := resp.Header.Get("ETag")
		if code, _, _ := do(t, c, "GET", w.srv.URL+path, "", map[string]string{"If-None-Match": etag}); etag == "" || code != http.StatusNotModified {
			t.Errorf("GET %s again with its ETag %s: %d, want 304", path, etag, code)
		}
	}
	for _, path := range []string{"/ui/%2e%2e/x", "/ui/a%00b"} {
		if code, _, _ := do(t, c, "GET", w.srv.URL+path, "", nil); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, code)
		}
	}
	if code, _, _ := do(t, c, "POST", w.srv.URL+"/ui/app.js", "{}", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("POST an asset: %d, want 405", code)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// wrong is tok with its first digit changed.
func wrong(tok string) string {
	if tok[0] == '0' {
		return "1" + tok[1:]
	}
	return "0" + tok[1:]
}
