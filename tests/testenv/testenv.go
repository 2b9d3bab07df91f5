// Package testenv finds or builds what integration tests need: the runsc
// binary and freshly built smolvm binaries.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Integration skips t in the fast tier (go test -short), which needs no
// root, runsc, QEMU, kube-apiserver, node or Chromium: every test that
// needs one of them calls it (Runsc and Kube do), so the fast tier is
// what is left.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: not in the fast tier (-short)")
	}
}

// NeedRoot skips t when not run as root (it fails in CI, which runs as
// root): tests of what only root can do, such as giving unpacked files an
// image's owners, are left out of an unprivileged fast-tier run.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI runs as root")
	}
	t.Skip("needs root")
}

// GoList runs `go list ARGS` in the module's root and returns what it
// printed. Another user than root cannot read root's module cache, so
// there a failure skips the test (NeedRoot) rather than failing it.
func GoList(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = Root()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		NeedRoot(t)
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// Runsc returns the runsc to test with, skipping the test when there is
// none (unit-only runs). CI always has one: .ci/run builds it.
func Runsc(t testing.TB) string {
	t.Helper()
	Integration(t)
	if os.Geteuid() != 0 {
		t.Skip("sandbox tests need root")
	}
	if p := os.Getenv("SMOLVM_RUNSC"); p != "" {
		return p
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("runsc not found in CI: .ci/run must build it")
		}
		t.Skip("runsc not installed; run scripts/install.sh")
	}
	return p
}

// Kube returns the kube-apiserver and etcd that the kube/ tests run
// against: $TEST_ASSET_KUBE_APISERVER and $TEST_ASSET_ETCD (envtest's own
// variables), else what scripts/kube-tools.sh built for tools/kube's pin
// under /usr/local. It skips the test without them, except in CI, which
// builds them (scripts/test.sh).
func Kube(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	Integration(t)
	apiserver, etcd = os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD")
	if apiserver == "" || etcd == "" {
		mod, err := os.ReadFile(filepath.Join(Root(), "tools", "kube", "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		pin := regexp.MustCompile(`k8s\.io/kubernetes (v\S+)`).FindSubmatch(mod)
		if pin == nil {
			t.Fatal("tools/kube/go.mod pins no k8s.io/kubernetes")
		}
		dir := filepath.Join("/usr/local/lib/smolvm/kube", string(pin[1]))
		apiserver, etcd = filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd")
	}
	for _, p := range []string{apiserver, etcd} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%v in CI: scripts/test.sh must build it (scripts/kube-tools.sh)", err)
			}
			t.Skipf("%v; run scripts/kube-tools.sh", err)
		}
	}
	return apiserver, etcd
}

// Gitea returns the Gitea server the forge tests run against:
// $SMOLVM_GITEA, else what scripts/gitea-tools.sh built for
// tools/gitea/pin's version under /usr/local. It skips the test without
// it, except in CI, which builds it (scripts/test.sh).
func Gitea(t testing.TB) string {
	t.Helper()
	Integration(t)
	p := os.Getenv("SMOLVM_GITEA")
	if p == "" {
		pin, err := os.ReadFile(filepath.Join(Root(), "tools", "gitea", "pin"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^code\.gitea\.io/gitea (v\S+) `).FindSubmatch(pin)
		if m == nil {
			t.Fatal("tools/gitea/pin names no code.gitea.io/gitea version")
		}
		p = filepath.Join("/usr/local/lib/smolvm/gitea", string(m[1]), "gitea")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v in CI: scripts/test.sh must build it (scripts/gitea-tools.sh)", err)
		}
		t.Skipf("%v; run scripts/gitea-tools.sh", err)
	}
	return p
}

// Guest returns a freshly built smolvm-guest. It is static, so it can run
// as PID 1 inside any sandbox.
func Guest(t testing.TB) string { return build(t, "smolvm-guest") }

// Smolvm returns a freshly built smolvm CLI, for tests that need a real
// separate process (crashes, concurrent CLIs).
func Smolvm(t testing.TB) string { return build(t, "smolvm") }

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*built{}
)

// build compiles cmd/<name> once per test process.
func build(t testing.TB, name string) string {
	t.Helper()
	mu.Lock()
	b, ok := builds[name]
	if !ok {
		b = &built{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		// Test processes of several packages build at once: each writes
		// its own file, then renames it over the shared one atomically.
		dir := filepath.Join(Root(), "bin")
		b.path = filepath.Join(dir, name+"-test")
		tmp := fmt.Sprintf("%s.%d", b.path, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "smolvm.dev/smolvm/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %v\n%s", name, err, out)
			return
		}
		b.err = os.Rename(tmp, b.path)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Root is the directory of smolvm's module (the repository's root).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GitRepo makes a git repository holding files (slash paths to contents)
// in one commit, "base".
func GitRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// Cache is a directory for what tests make slowly and may keep between
// runs and clones (the browser image's root filesystem): under the
// user's cache directory, outside the work tree.
func Cache(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "smolvm-test", name)
}
