package e2b

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"smolvm.dev/smolvm/internal/testmgr"
	"smolvm.dev/smolvm/internal/testserve"
	"smolvm.dev/smolvm/server/ports"
)

const testKey = "e2b-test-key"

// server is an E2B API under test: its base URL and API key, and the
// manager over its data dir.
type server struct {
	URL, Key string
	env      *testmgr.Env
}

// newServer serves the handler in-process on a real loopback listener.
func newServer(t testing.TB) *server {
	t.Helper()
	return newServerOn(t, testmgr.New(t))
}

// newServerOn serves the handler over env's manager.
func newServerOn(t testing.TB, env *testmgr.Env) *server {
	t.Helper()
	h, err := New(context.Background(), Options{
		Manager: env.Manager, Store: env.Store, Snapshots: env.Snapshots,
		Authorize: func(r *http.Request) bool { return tokenEqual(r.Header.Get("X-API-KEY"), testKey) },
		MaxUpload: 1 << 20, Ports: ports.New(env.Manager.DialPort),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		h.Close()
	})
	return &server{URL: ts.URL, Key: testKey, env: env}
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
	cmd := exec.Command(node, "--test", "--test-reporter=spec")
	cmd.Dir = compatDir()
	cmd.Env = s.sdkEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("SDK scenarios failed: %v", err)
	}
}
