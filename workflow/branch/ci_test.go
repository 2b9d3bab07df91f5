package branch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/rules"
)

const workflowYAML = `name: ci
on: [push]
env:
  GREETING: hello
jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - run: echo lint
  test:
    name: Unit tests
    runs-on: ubuntu-latest
    defaults:
      run:
        working-directory: sub
    env:
      LEVEL: "2"
      TOKEN: ${{ secrets.TOKEN }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {python-version: "3.12"}
      - name: show
        run: echo "$GREETING $LEVEL $STEP it's $(pwd)"
        env:
          STEP: one
      - name: matrix
        run: echo ${{ matrix.os }}
      - name: posix
        shell: sh
        working-directory: .
        run: |
          echo second
          false
      - name: never
        run: echo never
`

// The run: steps of a job become one script: workflow and job env, the
// job's default working directory, each step's shell and env, stopping
// at the first failure. uses: steps and expressions are listed, not run.
func TestGitHubCI(t *testing.T) {
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".github", "workflows"), 0o755)
	os.MkdirAll(filepath.Join(repo, "sub"), 0o755)
	os.WriteFile(filepath.Join(repo, ".github", "workflows", "ci.yml"), []byte(workflowYAML), 0o644)
	for _, job := range []string{"test", "Unit tests"} {
		ci, err := GitHubCI(repo, job)
		if err != nil {
			t.Fatal(err)
		}
		if ci.Source != "github:.github/workflows/ci.yml#test" {
			t.Errorf("source %q", ci.Source)
		}
		want := []string{"job test env TOKEN", "uses actions/checkout@v4", "uses actions/setup-python@v5", "matrix: expressions"}
		if len(ci.Unsupported) != len(want) {
			t.Fatalf("unsupported %q", ci.Unsupported)
		}
		for i, w := range want {
			if !strings.Contains(ci.Unsupported[i], w) {
				t.Errorf("unsupported[%d] = %q, want %q", i, ci.Unsupported[i], w)
			}
		}
		cmd := exec.Command("sh", "-c", ci.Command)
		cmd.Dir = repo
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("script: %v\n%s\n%s", err, out, ci.Command)
		}
		if got := string(out); got != "hello 2 one it's "+filepath.Join(repo, "sub")+"\nsecond\n" {
			t.Errorf("script printed %q", got)
		}
	}
	if _, err := GitHubCI(repo, "deploy"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "lint, test") {
		t.Errorf("missing job: %v", err)
	}
	os.WriteFile(filepath.Join(repo, ".github", "workflows", "bad.yaml"), []byte("jobs: [\n"), 0o644)
	if _, err := GitHubCI(repo, "test"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad yaml: %v", err)
	}
}

func TestDetectCI(t *testing.T) {
	repo := t.TempDir()
	if _, err := DetectCI(repo, "", rules.Commands{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("empty repo: %v", err)
	}
	os.WriteFile(filepath.Join(repo, "Makefile"), []byte("build:\n\ttrue\ntest: build\n\ttrue\n"), 0o644)
	if ci, err := DetectCI(repo, "", rules.Commands{}); err != nil || ci.Command != "make test" {
		t.Errorf("Makefile: %+v %v", ci, err)
	}
	if ci, _ := DetectCI(repo, "sh t.sh", rules.Commands{}); ci.Command != "sh t.sh" || ci.Source != "--test" {
		t.Errorf("--test: %+v", ci)
	}
	// The rule files' test block comes before discovery.
	os.Mkdir(filepath.Join(repo, ".git"), 0o755)
	os.WriteFile(filepath.Join(repo, "AGENTS.md"), []byte("# Repo\n\n## Tests\n\n```sh\nmake check\n```\n"), 0o644)
	rs, err := rules.Load(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := DetectCI(repo, "", rs.Commands()); err != nil || ci.Command != "set -e\nmake check" || ci.Source != "AGENTS.md:5" {
		t.Errorf("AGENTS.md: %+v %v", ci, err)
	}
}

func TestRank(t *testing.T) {
	bs := []*Branch{
		{K: 1, State: Red, DiffLines: 1},
		{K: 2, State: Passed, DiffLines: 40, Interventions: 0},
		{K: 3, State: Passed, DiffLines: 10, Interventions: 2},
		{K: 4, State: Passed, DiffLines: 10, Interventions: 1},
		{K: 5, State: Killed},
	}
	var got []int
	for _, b := range Rank(bs) {
		got = append(got, b.K)
	}
	if want := []int{4, 3, 2, 1, 5}; !slices.Equal(got, want) {
		t.Errorf("rank %v, want %v", got, want)
	}
}
