package guard

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"smolvm.dev/smolvm/workflow/trust"
)

const (
	baseGo = `package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(1, 2); got != 3 {
		t.Errorf("Add(1, 2) = %d, want 3", got)
	}
}

func TestSub(t *testing.T) {
	if got := Sub(3, 2); got != 1 {
		t.Fatalf("Sub = %d", got)
	}
}
`
	basePy = `import pytest
from calc import add


def test_add():
    assert add(1, 2) == 3


def test_neg():
    assert add(-1, -2) == -3
`
	baseJS = `const test = require('node:test');
const assert = require('node:assert');
test('adds', () => { assert.strictEqual(add(1, 2), 3); });
`
)

// diffOf commits base in a real git repository, applies change, and
// returns git diff's output as the runner takes it.
func diffOf(t *testing.T, change func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"calc.go":      "package calc\n\nfunc Add(a, b int) int { return a - b }\n",
		"calc_test.go": baseGo, "calc.py": "def add(a, b):\n    return a - b\n",
		"test_calc.py": basePy, "calc.test.js": baseJS,
		"testdata/out.golden": "3\n", ".gitignore": "*.pyc\n",
	}
	for name, data := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
	change(dir)
	git(t, dir, "add", "-A")
	return git(t, dir, "diff", "--cached", "--no-ext-diff", "--no-textconv", "-M", "HEAD")
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func edit(t *testing.T, dir, name, old, new string) {
	t.Helper()
	p := filepath.Join(dir, name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", name, old)
	}
	os.WriteFile(p, []byte(strings.Replace(string(data), old, new, 1)), 0o644)
}

func testsAllowed(t *testing.T) *trust.Policy {
	p, err := trust.Parse("/r", "policy.toml", []byte("default = \"allow\"\n[tests]\nallow = [\"**\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func rules(vs []Violation) []Rule {
	var rs []Rule
	for _, v := range vs {
		if !slices.Contains(rs, v.Rule) {
			rs = append(rs, v.Rule)
		}
	}
	slices.Sort(rs)
	return rs
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		policy bool // tests class allows writes
		weaken bool
		want   []Rule
	}{
		{"fix the code", func(t *testing.T, d string) { edit(t, d, "calc.go", "a - b", "a + b") }, false, false, nil},
		{"protected by default", func(t *testing.T, d string) { edit(t, d, "calc_test.go", "want 3", "want three") }, false, false, []Rule{Protected}},
		{"add a test", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "def test_neg", "def test_zero():\n    assert add(0, 0) == 0\n\n\ndef test_neg")
		}, true, false, nil},
		{"delete a Go test", func(t *testing.T, d string) {
			edit(t, d, "calc_test.go", "func TestSub(t *testing.T) {\n\tif got := Sub(3, 2); got != 1 {\n\t\tt.Fatalf(\"Sub = %d\", got)\n\t}\n}\n", "")
		}, true, false, []Rule{RemovedTest, Weakened}},
		{"delete the test file", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "test_calc.py")) }, true, false, []Rule{RemovedTest, Weakened}},
		{"delete the test file, protected", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "calc_test.go")) }, false, false, []Rule{Protected, RemovedTest, Weakened}},
		{"move a test between files", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "def test_neg():\n    assert add(-1, -2) == -3\n", "")
			os.WriteFile(filepath.Join(d, "test_neg.py"), []byte("from calc import add\n\n\ndef test_neg():\n    assert add(-1, -2) == -3\n"), 0o644)
		}, true, false, nil},
		{"t.Skip", func(t *testing.T, d string) {
			edit(t, d, "calc_test.go", "func TestAdd(t *testing.T) {\n", "func TestAdd(t *testing.T) {\n\tt.Skip(\"flaky\")\n")
		}, true, false, []Rule{Skipped}},
		{"pytest skip", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "def test_add", "@pytest.mark.skip\ndef test_add")
		}, true, false, []Rule{Skipped}},
		{"xfail", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "def test_add", "@pytest.mark.xfail\ndef test_add")
		}, true, false, []Rule{Skipped}},
		{"it.only", func(t *testing.T, d string) { edit(t, d, "calc.test.js", "test('adds'", "test.only('adds'") }, true, false, []Rule{Skipped}},
		{"remove an assertion", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "    assert add(1, 2) == 3\n", "    add(1, 2)\n")
		}, true, false, []Rule{Weakened}},
		{"loosen an assertion", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "assert add(1, 2) == 3", "assert add(1, 2) >= -10")
		}, true, false, []Rule{Weakened}},
		{"assert True", func(t *testing.T, d string) { edit(t, d, "test_calc.py", "assert add(1, 2) == 3", "assert True") }, true, false, []Rule{Weakened}},
		{"golden file", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "testdata/out.golden"), []byte("-1\n"), 0o644)
		}, true, false, []Rule{Snapshot}},
		{"gitignore hides a file", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, ".gitignore"), []byte("*.pyc\nconftest.py\n"), 0o644)
		}, true, false, []Rule{IgnoreFile}},
		{"weakening allowed", func(t *testing.T, d string) {
			edit(t, d, "test_calc.py", "def test_add", "@pytest.mark.skip\ndef test_add")
		}, true, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			diff := diffOf(t, func(d string) { c.change(t, d) })
			o := Options{AllowWeaken: c.weaken}
			if c.policy {
				o.Policy = testsAllowed(t)
			}
			vs := Check(diff, o)
			if got := rules(vs); !slices.Equal(got, c.want) {
				t.Errorf("rules = %v, want %v\nviolations: %v\ndiff:\n%s", got, c.want, vs, diff)
			}
			if len(vs) > 0 && !strings.Contains(Feedback(vs), vs[0].Reason) {
				t.Error("feedback lacks the reason")
			}
		})
	}
}

func TestParseDiffRename(t *testing.T) {
	diff := diffOf(t, func(d string) { os.Rename(filepath.Join(d, "calc_test.go"), filepath.Join(d, "add_test.go")) })
	fs := ParseDiff(diff)
	if len(fs) != 1 || fs[0].Path != "add_test.go" || fs[0].OldPath != "calc_test.go" {
		t.Fatalf("rename parsed as %+v", fs)
	}
	// A pure rename removes no test.
	if vs := Check(diff, Options{Policy: testsAllowed(t)}); len(vs) != 0 {
		t.Fatalf("rename: %v", vs)
	}
}

// TestHunkRevert reverts each hunk of a real git diff alone, and all of
// them from the last up, which gives back the old file.
func TestHunkRevert(t *testing.T) {
	var old, now []string
	for i := range 50 {
		old = append(old, fmt.Sprintf("line %d", i))
	}
	now = slices.Clone(old)
	now[2] = "changed 2"
	now = slices.Insert(now, 20, "added after 19")
	now = slices.Delete(now, 41, 43)                                          // old lines 40 and 41
	oldText, newText := strings.Join(old, "\n")+"\n", strings.Join(now, "\n") // no newline at the end now
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte(oldText), 0o644)
	os.WriteFile(filepath.Join(dir, "b"), []byte(newText), 0o644)
	out, _ := exec.Command("git", "diff", "--no-index", "--no-color", filepath.Join(dir, "a"), filepath.Join(dir, "b")).Output()
	files := ParseDiff(string(out))
	if len(files) != 1 || len(files[0].Hunks) != 4 {
		t.Fatalf("parsed %+v from\n%s", files, out)
	}
	hs := files[0].Hunks
	if got := hs[1].Added(); !slices.Equal(got, []int{21}) {
		t.Errorf("hunk 2 adds lines %v, want [21]", got)
	}
	one, err := hs[1].Revert(newText)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(newText, "added after 19\n", "", 1); one != want {
		t.Errorf("hunk 2 reverted:\n%s\nwant\n%s", one, want)
	}
	all := newText
	for i := len(hs) - 1; i >= 0; i-- {
		if all, err = hs[i].Revert(all); err != nil {
			t.Fatal(err)
		}
	}
	if all != oldText {
		t.Errorf("every hunk reverted:\n%q\nwant\n%q", all, oldText)
	}
	if _, err := hs[0].Revert("something else\n"); err == nil {
		t.Error("a hunk reverted out of a file it does not match")
	}
}
