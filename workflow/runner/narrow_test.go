package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"smolvm.dev/smolvm/workflow/runner/testparse"
)

func TestNarrowCommands(t *testing.T) {
	for _, c := range []struct {
		cmd, format string
		names       []string
		want        string // "" for the whole command
	}{
		{"go test -json ./...", "go-json", []string{"example.com/m.TestA/sub.1", "example.com/m/b.TestB", "example.com/m.TestA/other"},
			`go test -run '^(TestA|TestB)$' -json ./...`},
		{"GOFLAGS=-mod=mod go test -vet=off -json ./...", "go-json", []string{"gopkg.in/yaml.v3.TestX"},
			`GOFLAGS=-mod=mod go test -run '^(TestX)$' -vet=off -json ./...`},
		{"go test -json ./...", "go-json", []string{"example.com/m"}, ""}, // the package failed to build
		{"node --test --test-reporter=tap", "tap", []string{"add", "mul > inner", "it's (odd)"},
			`node --test --test-name-pattern='^add$' --test-name-pattern='^mul$' --test-name-pattern='^it'\''s \(odd\)$' --test-reporter=tap`},
		{"cd x && node --test", "tap", []string{"add"}, `cd x && node --test --test-name-pattern='^add$'`},
		{"prove -v t/", "tap", []string{"add"}, ""},
		{"python3 -m pytest -rA -p no:cacheprovider", "pytest", []string{"test_a.py::test_x", "t/test_b.py::TestC::test_y[1-2]"},
			`python3 -m pytest -rA -p no:cacheprovider 'test_a.py::test_x' 't/test_b.py::TestC::test_y[1-2]'`},
		{"pytest", "pytest", []string{"test_a.py::test_x"}, `pytest 'test_a.py::test_x'`},
		{"pytest tests/unit -rA", "pytest", []string{"test_a.py::test_x"}, ""}, // a path would run whole
		{"pytest -rA | tee log", "pytest", []string{"test_a.py::test_x"}, ""},
		{"npx jest --json", "jest-json", []string{"a > b"}, ""},
		{"make test", "exit", []string{"x"}, ""},
		{"go test -json ./...", "go-json", nil, ""},
	} {
		got, ok := narrow(c.cmd, c.format, c.names)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("narrow(%q, %v) = %q, %v; want %q", c.cmd, c.names, got, ok, c.want)
		}
	}
}

// The narrowed commands run, on the host, exactly the named tests.
func TestNarrowRuns(t *testing.T) {
	for _, c := range []struct {
		name, cmd string
		files     map[string]string
		pick      []string // failing names, as the parser gives them
		want      []string // the tests that ran (passed or failed)
	}{
		{"go", "go test -json ./...", map[string]string{
			"go.mod": "module example.com/m\n\ngo 1.22\n",
			"m_test.go": `package m
import "testing"
func TestA(t *testing.T) { t.Run("sub", func(t *testing.T) {}) }
func TestB(t *testing.T) {}
func TestC(t *testing.T) {}
`}, []string{"example.com/m.TestA/sub", "example.com/m.TestC"}, []string{"example.com/m.TestA/sub", "example.com/m.TestC"}},
		{"node", "node --test --test-reporter=tap", map[string]string{"a.test.js": `const test = require('node:test');
test('add', () => {});
test('add more', () => {});
test('mul', async (t) => { await t.test('inner', () => {}); });
`}, []string{"mul > inner", "add"}, []string{"add", "mul", "mul > inner"}},
		{"pytest", "/usr/bin/python3 -m pytest -rA -p no:cacheprovider", map[string]string{"test_a.py": `
def test_x(): pass
def test_y(): pass
class TestK:
    def test_z(self): pass
`}, []string{"test_a.py::TestK::test_z", "test_a.py::test_x"}, []string{"test_a.py::TestK::test_z", "test_a.py::test_x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := map[string]string{"go": "go", "node": "node", "pytest": "/usr/bin/python3"}[c.name]
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("no %s", bin)
			}
			dir := t.TempDir()
			for name, data := range c.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			format := map[string]string{"go": "go-json", "node": "tap", "pytest": "pytest"}[c.name]
			cmd, ok := narrow(c.cmd, format, c.pick)
			if !ok {
				t.Fatalf("%q not narrowed", c.cmd)
			}
			sh := exec.Command("sh", "-c", cmd)
			sh.Dir = dir
			out, err := sh.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
			res := testparse.Parse(out, nil, 0)
			var ran []string
			for _, tc := range res.Tests {
				if tc.Status != testparse.Skip {
					ran = append(ran, tc.Name)
				}
			}
			slices.Sort(ran)
			if res.Format != format || !slices.Equal(ran, c.want) {
				t.Fatalf("%s ran %q (%s), want %q\n%s", cmd, ran, res.Format, c.want, out)
			}
		})
	}
}
