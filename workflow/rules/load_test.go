package rules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// extract writes testdata/name.txtar into a new directory and returns it.
// Fixtures live in archives so that agents working on this repository do
// not mistake them for its own rules.
func extract(t *testing.T, name string) string {
	t.Helper()
	a, err := txtar.ParseFile(filepath.Join("testdata", name+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := txtar.FS(a)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, fsys); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadFixture(t *testing.T, name string) *Repo {
	t.Helper()
	repo, err := Load(context.Background(), extract(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// summary renders the parts of a rule that parsing decides, one line each.
func summary(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		s := fmt.Sprintf("%s %s %s dir=%s", r.Pos(), r.Activation, r.Tier, r.Dir)
		if len(r.Globs) > 0 {
			s += " globs=" + strings.Join(r.Globs, "|")
		}
		if r.ImportedBy != "" {
			s += " via=" + r.ImportedBy
		}
		if r.OverriddenBy != "" {
			s += " overridden-by=" + r.OverriddenBy
		}
		out = append(out, s)
	}
	return out
}

func findingKeys(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s:%d %s %s", f.File, f.Line, f.Severity, f.Code))
	}
	slices.Sort(out)
	return out
}

func TestParseFormats(t *testing.T) {
	tests := []struct {
		fixture  string
		rules    []string
		findings []string
	}{
		{
			fixture: "agents",
			rules: []string{
				"AGENTS.md:2 always instructions dir=.",
				"svc/AGENTS.md:1 always instructions dir=svc overridden-by=svc/AGENTS.override.md",
				"web/AGENTS.md:1 always instructions dir=web",
				"svc/AGENTS.override.md:1 always override dir=svc",
				"svc/billing/AGENTS.md:1 always instructions dir=svc/billing",
			},
		},
		{
			fixture: "claude",
			rules: []string{
				"CLAUDE.md:1 always instructions dir=.",
				"docs/style.md:1 always instructions dir=. via=CLAUDE.md:4",
				"shared/common.md:1 always instructions dir=. via=docs/style.md:2",
				"CLAUDE.md:5 always instructions dir=.",
				".claude/rules/api.md:7 glob rule-file dir=. globs=app/api/**/*.go|docs/*.md",
				".claude/rules/general.md:1 always rule-file dir=.",
				".claude/rules/none.md:4 glob rule-file dir=. globs=nothing/**",
				"app/CLAUDE.md:1 always instructions dir=app",
			},
			findings: []string{
				".claude/rules/none.md:2 warning glob-no-match",
				"CLAUDE.md:10 error import-unresolved",
			},
		},
		{
			fixture: "cursor",
			rules: []string{
				".cursorrules:1 always legacy dir=.",
				".cursor/rules/always.mdc:5 always rule-file dir=.",
				".cursor/rules/broken.mdc:5 manual rule-file dir=.",
				".cursor/rules/db.mdc:4 on-request rule-file dir=.",
				".cursor/rules/go.mdc:4 glob rule-file dir=. globs=cmd/**|src/*.{go,mod}",
				".cursor/rules/manual.mdc:1 manual rule-file dir=.",
				".cursor/rules/quoted.mdc:4 always rule-file dir=.",
				".cursor/rules/stale.mdc:4 glob rule-file dir=. globs=legacy/**/*.rb",
				".cursor/rules/ts.mdc:5 glob rule-file dir=. globs=*.ts|*.tsx",
			},
			findings: []string{
				".cursor/rules/broken.mdc:2 error frontmatter-malformed",
				".cursor/rules/go.mdc:2 warning glob-no-match",
				".cursor/rules/notes.md:0 warning cursor-md-ignored",
				".cursor/rules/quoted.mdc:2 error always-apply-string",
				".cursor/rules/stale.mdc:2 warning glob-no-match",
				".cursor/rules/ts.mdc:2 warning frontmatter-not-yaml",
				".cursor/rules/ts.mdc:2 warning glob-no-match",
			},
		},
		{
			fixture: "windsurf",
			rules: []string{
				".windsurfrules:1 always legacy dir=.",
				".windsurf/rules/always.md:4 always rule-file dir=.",
				".windsurf/rules/deploy.md:5 on-request rule-file dir=.",
				".windsurf/rules/manual.md:4 manual rule-file dir=.",
				".windsurf/rules/python.md:5 glob rule-file dir=. globs=**/*.py",
				".windsurf/rules/untriggered.md:1 manual rule-file dir=.",
				".windsurf/rules/wrong.md:4 manual rule-file dir=.",
			},
			findings: []string{
				".windsurf/rules/untriggered.md:0 warning windsurf-no-trigger",
				".windsurf/rules/wrong.md:2 error frontmatter-invalid",
			},
		},
		{
			fixture: "gemini",
			rules: []string{
				"GEMINI.md:1 always instructions dir=.",
				"lib/GEMINI.md:1 always instructions dir=lib",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			repo := loadFixture(t, tt.fixture)
			if got := summary(repo.Rules); !reflect.DeepEqual(got, tt.rules) {
				t.Errorf("rules:\n got %q\nwant %q", got, tt.rules)
			}
			slices.Sort(tt.findings)
			if got := findingKeys(repo.Findings); !slices.Equal(got, tt.findings) {
				t.Errorf("findings:\n got %q\nwant %q\n%v", got, tt.findings, repo.Findings)
			}
		})
	}
}

func TestRuleText(t *testing.T) {
	repo := loadFixture(t, "claude")
	want := map[string]string{
		"CLAUDE.md:1":             "# Team notes\n\nPrefer small commits.",
		"CLAUDE.md:5":             "Never push to main.\n\n```\n@not/an/import.md\n```",
		".claude/rules/api.md:7":  "API handlers return JSON errors.",
		"docs/style.md:1":         "Use tabs.",
		"shared/common.md:1":      "Be kind in reviews.",
		".claude/rules/none.md:4": "Unused.",
	}
	for _, r := range repo.Rules {
		w, ok := want[r.Pos()]
		if !ok {
			continue
		}
		delete(want, r.Pos())
		if r.Text != w {
			t.Errorf("%s text = %q, want %q", r.Pos(), r.Text, w)
		}
		if r.Hash != hashText(w) {
			t.Errorf("%s hash = %s, want sha256 of its text", r.Pos(), r.Hash)
		}
	}
	if len(want) > 0 {
		t.Errorf("rules not loaded: %v", want)
	}
}

func TestHashIgnoresLineEndings(t *testing.T) {
	a := normalize("\n\nUse tabs.  \r\nWrap errors.\r\n\r\n")
	b := normalize("Use tabs.\nWrap errors.")
	if a != b || hashText(a) != hashText(b) {
		t.Errorf("normalize: %q != %q", a, b)
	}
	if hashText(a) == hashText("Use tabs.\nWrap errors!") {
		t.Error("different texts hash the same")
	}
}

func TestImportCycles(t *testing.T) {
	repo := loadFixture(t, "cycle")
	want := []string{
		"CLAUDE.md:1 always instructions dir=.",
		"a.md:1 always instructions dir=. via=CLAUDE.md:2",
		"b.md:1 always instructions dir=. via=a.md:2",
		"deep/d1.md:1 always instructions dir=. via=CLAUDE.md:3",
		"deep/d2.md:1 always instructions dir=. via=deep/d1.md:2",
		"deep/d3.md:1 always instructions dir=. via=deep/d2.md:2",
		"deep/d4.md:1 always instructions dir=. via=deep/d3.md:2",
		"deep/d5.md:1 always instructions dir=. via=deep/d4.md:2",
	}
	if got := summary(repo.Rules); !reflect.DeepEqual(got, want) {
		t.Errorf("rules:\n got %q\nwant %q", got, want)
	}
	wantFindings := []string{
		"b.md:2 error import-cycle",
		"b.md:3 error import-cycle",
		"deep/d5.md:2 warning import-depth",
	}
	if got := findingKeys(repo.Findings); !slices.Equal(got, wantFindings) {
		t.Errorf("findings:\n got %q\nwant %q", got, wantFindings)
	}
	for _, f := range repo.Findings {
		if f.Line == 2 && f.Code == "import-cycle" && !strings.Contains(f.Message, "CLAUDE.md -> a.md -> b.md -> a.md") {
			t.Errorf("cycle message does not show the chain: %s", f.Message)
		}
	}
}

func TestUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "AGENTS.md", "Root rule.")
	// A dangling link and a directory named like a rule file: neither can
	// be read as a rule, and neither may stop the others from loading.
	if err := os.Symlink("missing.md", filepath.Join(dir, "CLAUDE.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "GEMINI.md"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "sub/AGENTS.md", "Sub rule.")
	repo, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(repo.Rules), []string{
		"AGENTS.md:1 always instructions dir=.",
		"sub/AGENTS.md:1 always instructions dir=sub",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("rules = %q, want %q", got, want)
	}
	if got, want := findingKeys(repo.Findings), []string{"CLAUDE.md:0 error unreadable"}; !slices.Equal(got, want) {
		t.Errorf("findings = %q, want %q", got, want)
	}
}

func TestSkipsHeavyDirectories(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "AGENTS.md", "Root rule.")
	write(t, dir, "node_modules/pkg/AGENTS.md", "Dependency rule.")
	write(t, dir, "vendor/x/CLAUDE.md", "Vendored rule.")
	write(t, dir, ".git/CLAUDE.md", "Not a rule.")
	repo, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(repo.Rules), []string{"AGENTS.md:1 always instructions dir=."}; !reflect.DeepEqual(got, want) {
		t.Errorf("rules = %q, want %q", got, want)
	}
	if want := []string{"AGENTS.md"}; !slices.Equal(repo.Files, want) {
		t.Errorf("files = %q, want %q", repo.Files, want)
	}
}

func TestFindRoot(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".git/HEAD", "ref: refs/heads/main\n")
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, start := range []string{dir, sub, filepath.Join(sub, "new-file.go")} {
		if got, err := FindRoot(start); err != nil || got != dir {
			t.Errorf("FindRoot(%s) = %q, %v; want %q", start, got, err, dir)
		}
	}
	// A .git file, as in worktrees, marks a root too.
	write(t, dir, "a/.git", "gitdir: elsewhere\n")
	if got, err := FindRoot(sub); err != nil || got != filepath.Join(dir, "a") {
		t.Errorf("FindRoot(%s) = %q, %v; want %q", sub, got, err, filepath.Join(dir, "a"))
	}
}

func write(t *testing.T, dir, rel, text string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
