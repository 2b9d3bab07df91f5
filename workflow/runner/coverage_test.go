package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A Go module whose Add is wrong; Abs and the package other have no
// failing test.
var goRepo = map[string]string{
	"go.mod":            "module example.com/calc\n\ngo 1.22\n",
	"calc/calc.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int {\n\treturn a - b\n}\n\n// Abs is |a|.\nfunc Abs(a int) int {\n\treturn a\n}\n",
	"calc/calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(Add(2, 3))\n\t}\n}\n\nfunc TestAbs(t *testing.T) {\n\tif Abs(3) != 3 {\n\t\tt.Fatal(Abs(3))\n\t}\n}\n",
	"other/other.go":    "package other\n\n// Two is 2.\nfunc Two() int { return 2 }\n",
}

// TestGoCoverage: the verdict run of a plain go test measures the
// change's lines, in every package of the module (-coverpkg): the fix
// and the branch Abs(3) takes ran; the branch it does not, and a
// function in a package no test imports, did not.
func TestGoCoverage(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, goRepo)
	agent := &script{steps: []func(context.Context, Step) error{func(ctx context.Context, s Step) error {
		fixed := strings.Replace(goRepo["calc/calc.go"], "a - b", "a + b", 1)
		fixed = strings.Replace(fixed, "func Abs(a int) int {\n", "func Abs(a int) int {\n\tif a < 0 {\n\t\treturn -a\n\t}\n", 1)
		if err := write("calc/calc.go", fixed)(ctx, s); err != nil {
			return err
		}
		return write("other/other.go", goRepo["other/other.go"]+"\n// Three is 3.\nfunc Three() int {\n\treturn 3\n}\n")(ctx, s)
	}}}
	run := fix(t, rn, repo, agent, func(o *Options) { o.Test, o.FlakyReruns, o.PinParallel = GoTest, -1, -1 })
	if run.State != Resolved || run.Evidence == nil {
		t.Fatalf("run = %+v", run)
	}
	c := run.Evidence.Coverage
	missed := []string{"calc/calc.go:11", "calc/calc.go:12", "other/other.go:7", "other/other.go:8", "other/other.go:9"}
	if c.Tool != "go-cover" || c.Changed != 7 || c.Executed != 2 || !slices.Equal(c.Missed, missed) || c.NotMeasured != 0 {
		t.Errorf("coverage = %+v, want go-cover, 2 of 7 executed, missed %q", c, missed)
	}
	if len(c.Files) != 2 || c.Files[0].File != "calc/calc.go" || c.Files[0].Executed != 2 || !slices.Equal(c.Files[0].Missed, []int{11, 12}) {
		t.Errorf("files = %+v", c.Files)
	}
	md := run.Evidence.Markdown()
	if !strings.Contains(md, "Diff coverage (go-cover): 2 of 7 changed lines executed") || !strings.Contains(md, "`calc/calc.go` (go-cover): 2 of 4 executed; not executed: lines 11, 12") {
		t.Errorf("markdown:\n%s", md)
	}
}

// A Python repository under pytest: add is wrong.
var pyRepo = map[string]string{
	"calc.py":      "def add(a, b):\n    return a - b\n\n\ndef clamp(x):\n    return x\n",
	"test_calc.py": "from calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_clamp():\n    assert clamp(3) == 3\n",
}

// TestPythonCoverage: the verdict run of pytest measures the change's
// lines through the collector: the fix and the test clamp(3) takes ran,
// the branch it skips did not, a comment is no code, and a module no
// test imports ran nothing.
func TestPythonCoverage(t *testing.T) {
	rn := newRunner(t)
	repo := gitRepo(t, pyRepo)
	agent := &script{steps: []func(context.Context, Step) error{func(ctx context.Context, s Step) error {
		fixed := "def add(a, b):\n    return a + b\n\n\ndef clamp(x):\n    # not below 0\n    if x < 0:\n        return 0\n    return x\n"
		if err := write("calc.py", fixed)(ctx, s); err != nil {
			return err
		}
		return write("util.py", "def unused():\n    return 42\n")(ctx, s)
	}}}
	run := fix(t, rn, repo, agent, func(o *Options) { o.Test, o.FlakyReruns, o.PinParallel = PyTest, -1, -1 })
	if run.State != Resolved || run.Evidence == nil {
		t.Fatalf("run = %+v", run)
	}
	c := run.Evidence.Coverage
	missed := []string{"calc.py:8", "util.py:1", "util.py:2"}
	if c.Tool != "python-trace" || c.Changed != 5 || c.Executed != 2 || !slices.Equal(c.Missed, missed) || c.NotMeasured != 0 {
		t.Errorf("coverage = %+v, want python-trace, 2 of 5 executed, missed %q", c, missed)
	}
	if len(c.Files) != 2 || c.Files[0].File != "calc.py" || c.Files[0].Changed != 3 || c.Files[1].File != "util.py" || c.Files[1].Executed != 0 {
		t.Errorf("files = %+v", c.Files)
	}
}

// TestGoCoverCommand: only a plain go test gets the coverage flags.
func TestGoCoverCommand(t *testing.T) {
	for _, c := range []struct{ test, want string }{
		{GoTest, strings.Replace(GoTest, "go test", "go test -coverprofile=/tmp/smolvm-coverage/go.cover -coverpkg=./...", 1)},
		{"go test ./...", "go test -coverprofile=/tmp/smolvm-coverage/go.cover -coverpkg=./... ./..."},
		{"go  test -run TestX ./pkg -args -v", "go test -coverprofile=/tmp/smolvm-coverage/go.cover -coverpkg=./... -run TestX ./pkg -args -v"},
		{"cd sub && go test ./...", ""},
		{"go test -run 'A|B' ./...", ""},
		{"go test -coverprofile=c.out ./...", ""},
		{"go test -c ./pkg", ""},
		{"go vet ./... ", ""},
		{"make test", ""},
		{"X=$(pwd) go test", ""},
		{"1X=y go test", ""},
	} {
		got, ok := goCoverCommand(c.test)
		if c.want == "" && (ok || got != c.test) || c.want != "" && (!ok || got != c.want) {
			t.Errorf("goCoverCommand(%q) = %q, %v; want %q", c.test, got, ok, c.want)
		}
	}
}

// TestGoLine: a line ran when a block holding its first character ran;
// a func line goes by its body; a line outside blocks holds no code.
func TestGoLine(t *testing.T) {
	src := []byte("package calc\n\nfunc Mul(a, b int) int {\n\tif a == 0 {\n\t\treturn 0\n\t}\n\treturn a * b\n}\n")
	var blocks []goBlock
	for _, l := range []string{"example.com/m/calc.go:3.24,4.12 1 1", "example.com/m/calc.go:4.12,6.3 1 0", "example.com/m/calc.go:7.2,7.14 1 1"} {
		file, b, ok := parseGoBlock(l)
		if !ok || file != "example.com/m/calc.go" {
			t.Fatalf("parseGoBlock(%q) = %q %+v %v", l, file, b, ok)
		}
		blocks = append(blocks, b)
	}
	want := map[int]lineRun{1: noCode, 3: ran, 4: ran, 5: notRun, 6: notRun, 7: ran, 8: noCode}
	for n, w := range want {
		if got := goLine(blocks, src, n); got != w {
			t.Errorf("line %d: %v, want %v", n, got, w)
		}
	}
}

// TestPyCollector: the collector on the host's python3, under unittest
// and in a subprocess: the lines each process ran are merged, a comment
// and an else: are no code.
func TestPyCollector(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"calc.py":     "def sign(x):\n    # the sign\n    if x < 0:\n        return -1\n    else:\n        return 1\n",
		"test_one.py": "import subprocess, sys, unittest\nfrom calc import sign\n\nclass T(unittest.TestCase):\n    def test_pos(self):\n        self.assertEqual(sign(2), 1)\n        subprocess.run([sys.executable, '-c', 'import calc; calc.sign(-1)'], check=True)\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "pycov"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pycov", "sitecustomize.py"), []byte(pyCollector), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-m", "unittest", "test_one")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "pycov"), "SMOLVM_PYCOV="+out, "SMOLVM_PYCOV_FILES="+filepath.Join(dir, "calc.py"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	// readPyLines keeps paths under Dir: read the files as they are.
	got := map[int]lineRun{}
	if m, _ := filepath.Glob(filepath.Join(out, "*.json")); len(m) != 2 {
		t.Fatalf("collector files %q, want one per process", m)
	}
	lines := readPyLinesUnder(out, dir)["calc.py"]
	for n := 1; n <= 6; n++ {
		got[n] = lines.line([]byte(files["calc.py"]), n)
	}
	want := map[int]lineRun{1: ran, 2: noCode, 3: ran, 4: ran, 5: noCode, 6: ran}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("line %d: %v, want %v (%+v)", n, got[n], w, lines)
		}
	}
}
