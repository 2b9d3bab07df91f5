package runner

import (
	"os"
	"path/filepath"
)

// DetectTest guesses a repository's test command from its files, in a
// form the parsers read per test; "" when nothing fits.
func DetectTest(repo string) string {
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(repo, name))
		return err == nil
	}
	switch {
	case has("go.mod"):
		return GoTest
	case has("pytest.ini") || has("pyproject.toml") || has("setup.cfg") || has("conftest.py") || has("tests"):
		return PyTest
	case has("package.json"):
		return "npm test"
	}
	if m, _ := filepath.Glob(filepath.Join(repo, "test_*.py")); len(m) > 0 {
		return PyTest
	}
	return ""
}

// Test commands that work in a sandbox over the host image: Go's caches
// live in /tmp (checkpointed with the rest, so copies start warm), and
// the toolchain where the host keeps it (/usr/local/go/bin, which the
// sandbox's PATH lacks). A cold go test of a tiny package took ~90 s in
// gVisor at load 20, compiling the standard library into the empty cache:
// the base checkpoint carries the warm cache to every later copy.
const (
	GoTest = "PATH=$PATH:/usr/local/go/bin GOCACHE=/tmp/go-cache GOPATH=/tmp/go GOTOOLCHAIN=local GOFLAGS=-mod=mod go test -vet=off -json ./..."
	PyTest = "python3 -m pytest -rA -p no:cacheprovider"
)
