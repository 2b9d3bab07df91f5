package e2b

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/tests/fakeruntime"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

const testKey = "e2b-test-key"

// server is an E2B API under test: its base URL and API key, and the
// manager over its data dir (nil over the fake runtime).
type server struct {
	URL, Key string
	env      *testmgr.Env
	h        *Handler // nil for a smolvm serve
	o        Options  // h's
}

// newServer serves the handler in-process on a real loopback listener.
func newServer(t testing.TB) *server {
	t.Helper()
	return newServerOn(t, testmgr.New(t))
}

// newServerOn serves the handler over env's manager.
func newServerOn(t testing.TB, env *testmgr.Env) *server {
	t.Helper()
	s := serve(t, Options{Manager: env.Manager, State: state(t, env.Store), Snapshots: env.Snapshots})
	s.env = env
	return s
}

// newFakeServer serves the handler over the in-memory fake runtime, for
// the tests of the handler alone: no root, no runsc.
func newFakeServer(t testing.TB) *server {
	t.Helper()
	rt := fakeruntime.New(t)
	return serve(t, Options{Manager: rt, State: state(t, rt.Store()), Snapshots: rt.Snapshots()})
}

// state is E2B's state in st.
func state(t testing.TB, st *store.Store) State {
	t.Helper()
	s, err := OpenState(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve serves the handler with o's runtime and stores, the test's key
// and a 1 MiB upload limit, in-process on a real loopback listener.
func serve(t testing.TB, o Options) *server {
	t.Helper()
	o.Authorize = func(r *http.Request) (*http.Request, bool) { return r, tokenEqual(r.Header.Get("X-API-KEY"), testKey) }
	o.MaxUpload, o.Ports = 1<<20, ports.New(o.Manager.DialPort)
	h, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		h.Close()
	})
	return &server{URL: ts.URL, Key: testKey, h: h, o: o}
}

// testDomain is the --domain of smolvmServe: getHost(port) is
// PORT-ID.testDomain, which tests resolve to the server themselves.
const testDomain = "sandbox.test"

// smolvmServe starts a real `smolvm serve --domain testDomain` on a
// loopback port over a fresh data dir, and returns its E2B mount and API
// token.
func smolvmServe(t testing.TB) *server {
	t.Helper()
	env := testmgr.New(t) // registered first, so it cleans up after the server stops
	srv := testserve.Start(t, env.Dir, env.GuestBinary, "--domain", testDomain)
	return &server{URL: srv.URL + "/e2b", Key: srv.Token, env: env}
}

// compatDir is the Node project that runs scenarios through the real SDK.
func compatDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "sdk", "e2b-compat")
}

// nodeTools returns node and npm, skipping without them outside CI.
func nodeTools(t testing.TB) (node, npm string) {
	t.Helper()
	testenv.Integration(t)
	node, nerr := exec.LookPath("node")
	npm, merr := exec.LookPath("npm")
	if nerr != nil || merr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node and npm are required in CI (scripts/test.sh installs them)")
		}
		t.Skip("node/npm not installed")
	}
	return node, npm
}

// installSDK runs npm ci when the pinned e2b package is not installed yet.
func installSDK(t testing.TB, npm string) {
	t.Helper()
	dir := compatDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter", "package.json")); err == nil {
		return
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// sdkEnv points the SDK at s with nothing but its own settings.
func (s *server) sdkEnv() []string {
	return append(os.Environ(), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+s.Key, "SMOLVM_E2B_DOMAIN="+testDomain, "SMOLVM_PORT_SERVER="+portServer)
}

// TestSDKScenarios runs sdk/e2b-compat's scenario suite through the
// official e2b npm package, unmodified, against `smolvm serve`.
func TestSDKScenarios(t *testing.T) {
	node, npm := nodeTools(t)
	installSDK(t, npm)
	s := smolvmServe(t)
	s.runNode(t, node)
}

// runNode runs `node --test` with the SDK pointed at s, over files (none:
// the suite under test/), failing t if a scenario fails.
// SMOLVM_E2B_SCENARIOS narrows it to the scenarios whose names match.
func (s *server) runNode(t *testing.T, node string, files ...string) {
	t.Helper()
	args := []string{"--test", "--test-reporter=spec"}
	if p := os.Getenv("SMOLVM_E2B_SCENARIOS"); p != "" {
		args = append(args, "--test-name-pattern="+p) // a subset, while working on one
	}
	cmd := exec.Command(node, append(args, files...)...)
	cmd.Dir = compatDir()
	cmd.Env = s.sdkEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %v:\n%s", files, out)
	if err != nil {
		t.Fatalf("SDK scenarios failed: %v", err)
	}
}

// TestSDKAtRoot runs root.mjs through the official e2b npm package with
// the real `smolvm serve`'s root as its base URL, where E2B's routes are
// served around the native API's; a route E2B's API lacks gets E2B's
// error shape, with a message saying where the APIs are.
func TestSDKAtRoot(t *testing.T) {
	node, npm := nodeTools(t)
	installSDK(t, npm)
	s := smolvmServe(t)
	s.URL = strings.TrimSuffix(s.URL, "/e2b")

	req, _ := http.NewRequest(http.MethodGet, s.URL+"/no-such-api", nil)
	req.Header.Set("X-API-KEY", s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e e2bapi.Error
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil || e.Code != http.StatusNotFound ||
		!strings.Contains(e.Message, "/e2b") || !strings.Contains(e.Message, "/v1") {
		t.Fatalf("GET /no-such-api: %d %s; want E2B's 404 saying where the APIs are", resp.StatusCode, body)
	}
	s.runNode(t, node, "root.mjs")
}

// TestSDKTenants runs tenants.mjs through the official e2b npm package
// against a real smolvm serve with two tenants, each with its own key:
// the second reaches none of the first's sandboxes or snapshots.
func TestSDKTenants(t *testing.T) {
	node, npm := nodeTools(t)
	installSDK(t, npm)
	s := smolvmServe(t)
	for _, name := range []string{"a", "b"} {
		t.Setenv("SMOLVM_KEY_"+strings.ToUpper(name), s.addTenant(t, name))
	}
	s.runNode(t, node, "tenants.mjs")
}

// addTenant makes tenant name on s, a smolvm serve, through the native
// API with the admin's token, and returns a key of it.
func (s *server) addTenant(t testing.TB, name string) string {
	t.Helper()
	admin := strings.TrimSuffix(s.URL, "/e2b")
	var key string
	for _, path := range []string{"/v1/tenants", "/v1/tenants/" + name + "/keys"} {
		body := ""
		if path == "/v1/tenants" {
			body = `{"name":"` + name + `"}`
		}
		req, _ := http.NewRequest(http.MethodPost, admin+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		var k struct{ Key string }
		if json.Unmarshal(b, &k); k.Key != "" {
			key = k.Key
		}
	}
	return key
}
