// Package testenv finds or builds what integration tests need: the runsc
// binary and a freshly built smolvm-agent.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Runsc returns the runsc to test with, skipping the test when there is
// none (unit-only runs). CI always has one: .ci/run builds it.
func Runsc(t testing.TB) string {
	t.Helper()
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

// Agent builds the smolvm-agent binary once per test process and returns
// its path. It is static, so it can run as PID 1 inside any sandbox.
func Agent(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		// Test processes of several packages build at once: each writes
		// its own file, then renames it over the shared one atomically.
		dir := filepath.Join(moduleRoot(), "bin")
		binPath = filepath.Join(dir, "smolvm-agent-test")
		tmp := fmt.Sprintf("%s.%d", binPath, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "smolvm.dev/smolvm/cmd/smolvm-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{out: string(out), err: err}
			return
		}
		buildErr = os.Rename(tmp, binPath)
	})
	if buildErr != nil {
		t.Fatalf("build smolvm-agent: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
