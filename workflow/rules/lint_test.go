package rules

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestClaims(t *testing.T) {
	tests := []struct {
		text string
		want map[string][]string // topic name -> choices
	}{
		{"Use pnpm, not npm.", map[string][]string{"JavaScript package manager": {"pnpm"}}},
		{"Use pnpm instead of npm or yarn", map[string][]string{"JavaScript package manager": {"pnpm"}}},
		{"Never use yarn.", nil},
		{"We use bun (don't use npm)", map[string][]string{"JavaScript package manager": {"bun"}}},
		{"Run `go test ./...` before pushing", map[string][]string{"test command": {"go test"}}},
		{"Don't run `make test`; use `go test -race ./...`", map[string][]string{"test command": {"go test"}}},
		{"Run tests with `npm run test`", map[string][]string{"test command": {"the package.json test script"}, "JavaScript package manager": {"npm"}}},
		{"Use pytest for tests", map[string][]string{"test command": {"pytest"}}},
		{"Test components with vitest, not jest", map[string][]string{"JavaScript test runner": {"vitest"}}},
		{"python -m unittest discover", map[string][]string{"test command": {"unittest"}}},
		{"uv pip install -r requirements.txt", map[string][]string{"Python package manager": {"uv"}}},
		{"pip install -e .", map[string][]string{"Python package manager": {"pip"}}},
		{"Manage dependencies with Poetry", map[string][]string{"Python package manager": {"poetry"}}},
		{"Treat the parser as a black box.", nil},
		{"Format with black", map[string][]string{"Python formatter": {"black"}}},
		{"Prefer ruff format over black", map[string][]string{"Python formatter": {"ruff format"}}},
		{"Format with prettier", map[string][]string{"JavaScript formatter": {"prettier"}}},
		{"Run gofumpt, not gofmt", map[string][]string{"Go formatter": {"gofumpt"}}},
	}
	for _, tt := range tests {
		r := Rule{Source: "AGENTS.md", Line: 1, Text: tt.text}
		got := map[string][]string{}
		for ti, cs := range claims(&r) {
			for _, c := range cs {
				got[topics[ti].name] = append(got[topics[ti].name], c.choice)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("%q: claims %v, want %v", tt.text, got, tt.want)
			continue
		}
		for k, v := range tt.want {
			if !slices.Equal(got[k], v) {
				t.Errorf("%q: claims %v, want %v", tt.text, got, tt.want)
			}
		}
	}
}

func TestLintConflicts(t *testing.T) {
	repo := loadFixture(t, "monorepo")
	fs := repo.Lint(LintOptions{Budget: DefaultBudget, MaxFile: DefaultMaxFile})
	want := []string{
		"packages/api/AGENTS.md:2 error conflict",
		"packages/api/AGENTS.md:3 error conflict",
		"packages/web/.cursor/rules/format.mdc:4 error conflict",
		"packages/web/AGENTS.md:1 error conflict",
	}
	if got := findingKeys(fs); !slices.Equal(got, want) {
		t.Fatalf("findings:\n got %q\nwant %q\n%v", got, want, fs)
	}
	// Each conflict names both sides; sibling packages never conflict.
	wantMsgs := map[string][]string{
		"packages/api/AGENTS.md:2":                {`"go test" at AGENTS.md:4`, `"make test" at packages/api/AGENTS.md:2`, "files under packages/api/"},
		"packages/api/AGENTS.md:3":                {`"npm" at AGENTS.md:3`, `"yarn" at packages/api/AGENTS.md:3`},
		"packages/web/.cursor/rules/format.mdc:4": {`"prettier" at .cursor/rules/typescript.mdc:6`, `"biome" at packages/web/.cursor/rules/format.mdc:4`, "packages/web/src/app.ts"},
		"packages/web/AGENTS.md:1":                {`"npm" at AGENTS.md:3`, `"pnpm" at packages/web/AGENTS.md:1`},
	}
	for _, f := range fs {
		pos := f.File + ":" + strconv.Itoa(f.Line)
		for _, s := range wantMsgs[pos] {
			if !strings.Contains(f.Message, s) {
				t.Errorf("%s: message %q lacks %q", pos, f.Message, s)
			}
		}
		if strings.Contains(f.Message, "packages/web/") && strings.Contains(f.Message, "packages/api/") {
			t.Errorf("sibling packages reported as conflicting: %s", f)
		}
	}
}

func TestLintDuplicateTextConflictsOnce(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "AGENTS.md", "Run `pnpm test`.\nUse jest.\n")
	write(t, dir, "CLAUDE.md", "@AGENTS.md\n")
	write(t, dir, "web/AGENTS.md", "Tests use vitest.\n")
	repo, err := Load(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	// vitest contradicts jest, not the package.json script that runs it,
	// and the imported copy of AGENTS.md is not a second rule.
	got := repo.Lint(LintOptions{})
	if len(got) != 1 || !strings.Contains(got[0].Message, `"jest" at AGENTS.md:2 vs "vitest" at web/AGENTS.md:1`) {
		t.Errorf("findings = %v", got)
	}
}

func TestLintSizes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "AGENTS.md", strings.Repeat("Keep it short.\n", 100)) // 1500 bytes
	write(t, dir, "sub/AGENTS.md", strings.Repeat("Short.\n", 50))      // 350 bytes
	write(t, dir, "tiny/AGENTS.md", "Tiny.")
	repo, err := Load(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	got := findingKeys(repo.Lint(LintOptions{Budget: 1000, MaxFile: 300}))
	want := []string{"AGENTS.md:0 error file-over-budget", "sub/AGENTS.md:0 warning file-too-large"}
	if !slices.Equal(got, want) {
		t.Errorf("findings = %q, want %q", got, want)
	}
}
