// Package sdk_test runs the Python and TypeScript SDKs' own test suites
// (python3 -m unittest, node --test) against freshly built binaries, so
// that `go test ./...` (and CI) covers them.
package sdk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
)

// sdkEnv gives the suites the binaries and a closed test network (for
// the browser tests, whose pages are on its fake internet).
func sdkEnv(t *testing.T) []string {
	runsc := testenv.Runsc(t)
	w := nettest.New(t)
	return append(os.Environ(), "SMOLVM_BIN="+testenv.Smolvm(t), "SMOLVM_GUEST_BINARY="+testenv.Guest(t), "SMOLVM_RUNSC="+runsc,
		"SMOLVM_HOST=", "SMOLVM_TOKEN=", "SMOLVM_NET_NETNS="+w.HostNS, "SMOLVM_NET_RESOLVER="+w.Resolver)
}

// noChromium reports whether the browser tests may skip: outside CI,
// without chromium.
func noChromium(t *testing.T) bool {
	if _, err := os.Stat("/usr/lib/chromium/chromium"); err == nil {
		return false
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is required in CI (scripts/test.sh installs it)")
	}
	return true
}

// runSuite runs a suite and fails if it failed or skipped anything: here,
// with root and the binaries given, every test must run.
func runSuite(t *testing.T, tool string, allRan func(out string) bool, args ...string) {
	testenv.Integration(t)
	path, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found in CI", tool)
		}
		t.Skipf("%s not installed", tool)
	}
	env := sdkEnv(t)
	cmd := exec.Command(path, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v:\n%s", tool, args, out)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if !allRan(string(out)) {
		t.Fatalf("%s skipped tests", tool)
	}
}

func TestPythonSDK(t *testing.T) {
	mayskip := noChromium(t)
	noSkips := func(out string) bool {
		return !strings.Contains(out, "skipped") || mayskip && strings.Count(out, "skipped") == 1 && strings.Contains(out, "test_browser")
	}
	runSuite(t, "python3", noSkips, "-W", "error::ResourceWarning", "-m", "unittest", "discover", "-v", "-s", filepath.Join("python", "tests"))
}

func TestTypeScriptSDK(t *testing.T) {
	mayskip := noChromium(t)
	noSkips := func(out string) bool {
		return strings.Contains(out, "\n# skipped 0\n") || mayskip && strings.Contains(out, "\n# skipped 1\n") && strings.Contains(out, "# SKIP needs chromium")
	}
	runSuite(t, "node", noSkips, "--test", filepath.Join("typescript", "test"))
}
