package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
	"smolvm.dev/smolvm/tests/testenv"
)

// rulesMonorepo writes the rules package's monorepo fixture into a new git
// repository and returns its root.
func rulesMonorepo(t *testing.T) string {
	t.Helper()
	ar, err := txtar.ParseFile(filepath.Join(testenv.Root(), "workflow", "rules", "testdata", "monorepo.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := txtar.FS(ar)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, fsys); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	return dir
}

// rulesLinesInOrder fails unless each want string occurs in out, in order.
func rulesLinesInOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q after what came before:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
}

func TestRulesExplainMonorepo(t *testing.T) {
	c := newCLI(t, "")
	dir := rulesMonorepo(t)
	// No --root: the root is found from the path by walking up to .git.
	out, stderr, code := c.run("rules", "explain", filepath.Join(dir, "packages/web/src/app.ts"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rulesLinesInOrder(t, out,
		"packages/web/src/app.ts: 6 rules",
		"1. AGENTS.md:1  always: repository root",
		"2. CLAUDE.md:1  always: repository root",
		"3. docs/conventions.md:1  always: repository root, imported by CLAUDE.md:2",
		`4. .cursor/rules/typescript.mdc:6  glob "**/*.ts"`,
		"5. packages/web/AGENTS.md:1  always: directory packages/web/",
		`6. packages/web/.cursor/rules/format.mdc:4  glob "src/**/*.ts" under packages/web/`,
	)
	if strings.Contains(out, "packages/api") || strings.Contains(out, "packages/tools") {
		t.Errorf("sibling packages' rules listed for packages/web:\n%s", out)
	}

	out, _, code = c.run("rules", "explain", "--root", dir, filepath.Join(dir, "packages/api/main.go"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	rulesLinesInOrder(t, out,
		"packages/api/main.go: 4 rules",
		"1. AGENTS.md:1",
		"4. packages/api/AGENTS.md:1  always: directory packages/api/",
		"available, not included:",
		`- packages/api/.cursor/rules/db.mdc:4  on request: the agent decides from the description "Database migrations"  (not included up front)`,
	)
	if strings.Contains(out, "typescript.mdc") {
		t.Errorf("a *.ts rule applies to main.go:\n%s", out)
	}
}

func TestRulesExplainBudget(t *testing.T) {
	c := newCLI(t, "")
	dir := rulesMonorepo(t)
	file := filepath.Join(dir, "packages/web/src/app.ts")
	first, _, code := c.run("rules", "explain", "--budget", "40", file)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for range 3 {
		if again, _, _ := c.run("rules", "explain", "--budget", "40", file); again != first {
			t.Fatalf("explain is not deterministic:\n%s\n---\n%s", first, again)
		}
	}
	// The two deepest rules fit only in part; the cut is reported.
	rulesLinesInOrder(t, first,
		"2 rules, 40 bytes (budget 40)",
		"1. packages/web/AGENTS.md:1", "truncated: kept 17 of 18 bytes",
		"2. packages/web/.cursor/rules/format.mdc:4",
		"dropped by the budget:",
		"- AGENTS.md:1", "budget of 40 bytes is used up",
		"- CLAUDE.md:1", "- docs/conventions.md:1", "- .cursor/rules/typescript.mdc:6",
	)

	out, _, _ := c.run("rules", "explain", "--json", "--budget", "40", file)
	var res struct {
		Used    int
		Entries []struct{ Status string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if res.Used != 40 || len(res.Entries) != 6 || res.Entries[4].Status != "truncated" || res.Entries[0].Status != "dropped" {
		t.Errorf("json: %+v", res)
	}
}

func TestRulesLintMonorepo(t *testing.T) {
	c := newCLI(t, "")
	dir := rulesMonorepo(t)
	out, _, code := c.run("rules", "lint", "--root", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1 for conflicts:\n%s", code, out)
	}
	rulesLinesInOrder(t, out,
		`packages/api/AGENTS.md:2: error conflict: conflicting test command: "go test" at AGENTS.md:4 vs "make test" at packages/api/AGENTS.md:2`,
		`packages/api/AGENTS.md:3: error conflict: conflicting JavaScript package manager: "npm" at AGENTS.md:3 vs "yarn" at packages/api/AGENTS.md:3`,
		`packages/web/.cursor/rules/format.mdc:4: error conflict: conflicting JavaScript formatter: "prettier" at .cursor/rules/typescript.mdc:6 vs "biome" at packages/web/.cursor/rules/format.mdc:4; both apply to packages/web/src/app.ts`,
		`packages/web/AGENTS.md:1: error conflict: conflicting JavaScript package manager: "npm" at AGENTS.md:3 vs "pnpm" at packages/web/AGENTS.md:1`,
		"4 errors, 0 warnings",
	)
	// pnpm in packages/web and yarn in packages/api, or make test in
	// packages/api and go test in packages/tools, never meet in one file.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "packages/web/") && strings.Contains(line, "packages/api/") ||
			strings.Contains(line, "packages/api/") && strings.Contains(line, "packages/tools/") {
			t.Errorf("siblings reported as conflicting: %s", line)
		}
	}

	out, _, code = c.run("rules", "lint", "--json", "--root", dir)
	var rep struct {
		Findings []struct{ Severity, Code, File string }
		Errors   int
		Warnings int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if code != 1 || rep.Errors != 4 || rep.Warnings != 0 || len(rep.Findings) != 4 || rep.Findings[0].Code != "conflict" {
		t.Errorf("json lint (exit %d): %+v", code, rep)
	}
}

func TestRulesLintFindings(t *testing.T) {
	c := newCLI(t, "")
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	files := map[string]string{
		"CLAUDE.md":                "Read this.\n@docs/gone.md\n",
		".cursor/rules/a.mdc":      "---\nalwaysApply: \"true\"\n---\nA.\n",
		".cursor/rules/b.md":       "B.\n",
		".cursor/rules/c.mdc":      "---\nglobs: \"**/*.rs\"\n---\nC.\n",
		".windsurf/rules/d.md":     "---\ntrigger: always_on\n  nested: [\n---\nD.\n",
		"node_modules/x/AGENTS.md": "---\nbroken\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// lint without --root finds the repository from the working directory.
	t.Chdir(filepath.Join(dir, ".cursor"))
	out, _, code := c.run("rules", "lint")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	rulesLinesInOrder(t, out,
		".cursor/rules/a.mdc:2: error always-apply-string",
		".cursor/rules/b.md: warning cursor-md-ignored",
		`.cursor/rules/c.mdc:2: warning glob-no-match: glob "**/*.rs" matches no file`,
		".windsurf/rules/d.md: warning windsurf-no-trigger",
		".windsurf/rules/d.md:3: error frontmatter-malformed: frontmatter: yaml: line 3: mapping values are not allowed",
		"CLAUDE.md:2: error import-unresolved: @docs/gone.md",
		"3 errors, 3 warnings",
	)

	// Fixed, the same repository lints clean and exits 0.
	for name, text := range map[string]string{
		".cursor/rules/a.mdc":  "---\nalwaysApply: true\n---\nA.\n",
		".cursor/rules/c.mdc":  "---\nglobs: \"**/*.md\"\n---\nC.\n",
		".windsurf/rules/d.md": "---\ntrigger: manual\n---\nD.\n",
		"CLAUDE.md":            "Read this.\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, ".cursor/rules/b.md")); err != nil {
		t.Fatal(err)
	}
	out, _, code = c.run("rules", "lint")
	if code != 0 || !strings.Contains(out, "0 errors, 0 warnings") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	out, _, code = c.run("rules", "lint", "--json")
	if code != 0 || !strings.Contains(out, `"findings": [],`) {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestRulesRender(t *testing.T) {
	c := newCLI(t, "")
	dir := rulesMonorepo(t)
	file := filepath.Join(dir, "packages/web/src/app.ts")
	for format, title := range map[string]string{"claude": "# CLAUDE.md", "codex": "# AGENTS.md", "plain": "# Rules for packages/web/src/app.ts"} {
		out, stderr, code := c.run("rules", "render", file, "--format", format)
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit %d: %s", format, code, stderr)
		}
		rulesLinesInOrder(t, out, title,
			"source: AGENTS.md:1", "Install dependencies with `npm install`.",
			"source: docs/conventions.md:1", "Write commit subjects in the imperative mood.",
			"source: packages/web/.cursor/rules/format.mdc:4", "Format code with biome.")
	}
	out, stderr, code := c.run("rules", "render", file, "--format", "plain", "--budget", "40")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	rulesLinesInOrder(t, stderr, "dropped AGENTS.md:1", "truncated packages/web/AGENTS.md:1")
	if strings.Contains(out, "npm install") || !strings.Contains(out, "# dropped by the budget: AGENTS.md:1") {
		t.Errorf("budget not applied or not reported:\n%s", out)
	}
	if _, _, code := c.run("rules", "render", file, "--format", "cursor"); code != exitFailure {
		t.Errorf("unknown format: exit %d, want %d", code, exitFailure)
	}
	if _, _, code := c.run("rules", "explain", "--root", dir, t.TempDir()); code != exitFailure {
		t.Errorf("path outside the repository: exit %d, want %d", code, exitFailure)
	}
}
