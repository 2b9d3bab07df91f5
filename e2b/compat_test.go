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

	"smolvm.dev/smolvm/internal/testdeps"
	"smolvm.dev/smolvm/sandbox"
)

const testKey = "e2b-test-key"

// server is the E2B handler over a real sandbox manager, on a real
// loopback listener.
type server struct {
	URL string
	m   *sandbox.Manager
	h   *Handler
}

func newServer(t testing.TB) *server {
	t.Helper()
	d := testdeps.Open(t, t.TempDir())
	ctx := context.Background()
	m, err := sandbox.New(ctx, sandbox.Options{DataDir: d.Dir, Store: d.Store, Images: d.Images, Backend: d.Backend, AgentBinary: d.AgentBinary, Snapshots: d.Snapshots})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(ctx, Options{
		Manager: m, Store: d.Store,
		Authorize: func(r *http.Request) bool { return tokenEqual(r.Header.Get("X-API-KEY"), testKey) },
		MaxUpload: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		h.Close()
		sbs, _ := m.List(context.Background())
		for _, sb := range sbs {
			m.Remove(context.Background(), sb.ID, true)
		}
		m.GC(context.Background())
	})
	return &server{URL: ts.URL, m: m, h: h}
}

// compatDir is the Node project that runs scenarios through the real SDK.
func compatDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "sdk", "e2b-compat")
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
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err == nil {
		return
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// sdkEnv points the SDK at s.
func (s *server) sdkEnv(key string) []string {
	return append(os.Environ(),
		"E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+key,
		"E2B_DOMAIN=localhost", "NO_COLOR=1")
}

// TestSDKScenarios runs sdk/e2b-compat's scenario suite through the
// official e2b npm package, unmodified, against a live server.
func TestSDKScenarios(t *testing.T) {
	node, npm := nodeTools(t)
	s := newServer(t)
	installSDK(t, npm)
	cmd := exec.Command(node, "--test", "--test-reporter=spec")
	cmd.Dir = compatDir()
	cmd.Env = s.sdkEnv(testKey)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("SDK scenarios failed: %v", err)
	}
}
