package rules

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func entries(res *Resolution) []string {
	var out []string
	for _, e := range res.Entries {
		out = append(out, fmt.Sprintf("%s %s %s", e.Status, e.Rule.Pos(), e.Why))
	}
	return out
}

func TestResolve(t *testing.T) {
	tests := []struct {
		fixture, file string
		want          []string
	}{
		{"agents", "svc/billing/invoice.go", []string{
			"included AGENTS.md:2 always: repository root",
			"excluded svc/AGENTS.md:1 always: directory svc/",
			"included svc/AGENTS.override.md:1 always: directory svc/",
			"included svc/billing/AGENTS.md:1 always: directory svc/billing/",
		}},
		{"agents", "web/index.html", []string{
			"included AGENTS.md:2 always: repository root",
			"included web/AGENTS.md:1 always: directory web/",
		}},
		{"claude", "app/api/handler.go", []string{
			"included CLAUDE.md:1 always: repository root",
			"included docs/style.md:1 always: repository root, imported by CLAUDE.md:4",
			"included shared/common.md:1 always: repository root, imported by docs/style.md:2",
			"included CLAUDE.md:5 always: repository root",
			`included .claude/rules/api.md:7 glob "app/api/**/*.go"`,
			"included .claude/rules/general.md:1 always: repository root",
			"included app/CLAUDE.md:1 always: directory app/",
		}},
		{"cursor", "src/main.ts", []string{
			"included .cursorrules:1 always: legacy file at the repository root",
			"included .cursor/rules/always.mdc:5 always: repository root",
			"available .cursor/rules/broken.mdc:5 manual: only when a user mentions @broken",
			`available .cursor/rules/db.mdc:4 on request: the agent decides from the description "Database migrations"`,
			"available .cursor/rules/manual.mdc:1 manual: only when a user mentions @manual",
			"included .cursor/rules/quoted.mdc:4 always: repository root",
			`included .cursor/rules/ts.mdc:5 glob "*.ts"`,
		}},
		{"windsurf", "tool/main.py", []string{
			"included .windsurfrules:1 always: legacy file at the repository root",
			"included .windsurf/rules/always.md:4 always: repository root",
			`available .windsurf/rules/deploy.md:5 on request: the agent decides from the description "How to deploy"`,
			"available .windsurf/rules/manual.md:4 manual: only when a user mentions @manual",
			`included .windsurf/rules/python.md:5 glob "**/*.py"`,
			"available .windsurf/rules/untriggered.md:1 manual: only when a user mentions @untriggered",
			"available .windsurf/rules/wrong.md:4 manual: only when a user mentions @wrong",
		}},
		{"gemini", "lib/util.js", []string{
			"included GEMINI.md:1 always: repository root",
			"included lib/GEMINI.md:1 always: directory lib/",
		}},
		{"monorepo", "packages/web/src/app.ts", []string{
			"included AGENTS.md:1 always: repository root",
			"included CLAUDE.md:1 always: repository root",
			"included docs/conventions.md:1 always: repository root, imported by CLAUDE.md:2",
			`included .cursor/rules/typescript.mdc:6 glob "**/*.ts"`,
			"included packages/web/AGENTS.md:1 always: directory packages/web/",
			`included packages/web/.cursor/rules/format.mdc:4 glob "src/**/*.ts" under packages/web/`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+"/"+tt.file, func(t *testing.T) {
			res := loadFixture(t, tt.fixture).Resolve(tt.file, DefaultBudget)
			if got := entries(res); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("entries:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestResolveDuplicateText(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "AGENTS.md", "Same rule.\n")
	write(t, dir, "CLAUDE.md", "Same rule.")
	repo, err := Load(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	got := entries(repo.Resolve("x.go", 0))
	want := []string{
		"included AGENTS.md:1 always: repository root",
		"excluded CLAUDE.md:1 always: repository root",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries = %q, want %q", got, want)
	}
}

// TestBudgetCut checks the cut for every budget from nothing to more than
// enough: the kept rules are always the ones of highest precedence, at most
// one is truncated, the total fits, and the same input gives the same cut.
func TestBudgetCut(t *testing.T) {
	repo := loadFixture(t, "monorepo")
	const file = "packages/web/src/app.ts"
	full := repo.Resolve(file, 0)
	total := full.Used
	if n := len(full.Entries); n < 4 || full.Count(Included) != n {
		t.Fatalf("fixture should give several included rules, got %q", entries(full))
	}
	for budget := 1; budget <= total+3; budget++ {
		res := repo.Resolve(file, budget)
		if again := repo.Resolve(file, budget); !reflect.DeepEqual(res, again) {
			t.Fatalf("budget %d: two resolutions differ", budget)
		}
		if res.Used > budget {
			t.Errorf("budget %d: used %d", budget, res.Used)
		}
		sum, truncated := 0, 0
		for i, e := range res.Entries {
			sum += len(e.Text)
			switch e.Status {
			case Included:
				if e.Text != e.Rule.Text {
					t.Errorf("budget %d: %s included but text changed", budget, e.Rule.Pos())
				}
			case Truncated:
				truncated++
				if !strings.HasPrefix(e.Rule.Text, e.Text) || len(e.Text) >= len(e.Rule.Text) || e.Note == "" {
					t.Errorf("budget %d: %s badly truncated to %q (%s)", budget, e.Rule.Pos(), e.Text, e.Note)
				}
				if i > 0 && res.Entries[i-1].Status != Dropped {
					t.Errorf("budget %d: rule before the truncated one is %s", budget, res.Entries[i-1].Status)
				}
			case Dropped:
				if e.Text != "" || e.Note == "" {
					t.Errorf("budget %d: dropped %s keeps text or has no reason", budget, e.Rule.Pos())
				}
				if i > 0 && res.Entries[i-1].Status != Dropped {
					t.Errorf("budget %d: dropped %s after a kept rule", budget, e.Rule.Pos())
				}
			default:
				t.Errorf("budget %d: unexpected status %s", budget, e.Status)
			}
		}
		if sum != res.Used || truncated > 1 {
			t.Errorf("budget %d: sum %d used %d truncated %d", budget, sum, res.Used, truncated)
		}
		if budget >= total && res.Count(Included) != len(res.Entries) {
			t.Errorf("budget %d >= total %d cut something: %q", budget, total, entries(res))
		}
	}
	// Exactly the size of the last rule: it alone is kept, whole.
	last := full.Entries[len(full.Entries)-1].Rule
	res := repo.Resolve(file, len(last.Text))
	if res.Count(Included) != 1 || res.Count(Dropped) != len(res.Entries)-1 || res.Entries[len(res.Entries)-1].Status != Included {
		t.Errorf("budget %d: %q", len(last.Text), entries(res))
	}
	var b bytes.Buffer
	if err := res.Explain(&b); err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Entries[:len(res.Entries)-1] {
		if !strings.Contains(b.String(), "  - "+e.Rule.Pos()) {
			t.Errorf("explain does not report dropped %s:\n%s", e.Rule.Pos(), b.String())
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		text string
		n    int
		want string
	}{
		{"one\ntwo\nthree", 9, "one\ntwo"},
		{"one\ntwo\nthree", 100, "one\ntwo\nthree"},
		{"abcdef", 3, "abc"},
		{"héllo", 2, "h"}, // never split a character
	}
	for _, tt := range tests {
		if got := truncate(tt.text, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.text, tt.n, got, tt.want)
		}
	}
}

func TestRender(t *testing.T) {
	repo := loadFixture(t, "monorepo")
	res := repo.Resolve("packages/api/main.go", 0)
	for _, format := range Formats {
		var b bytes.Buffer
		if err := res.Render(&b, format); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		pos := 0
		for _, e := range res.Entries {
			if e.Status != Included {
				if !strings.Contains(out, "available on request: "+e.Rule.Pos()) {
					t.Errorf("%s: %s not listed as available:\n%s", format, e.Rule.Pos(), out)
				}
				continue
			}
			i := strings.Index(out[pos:], "source: "+e.Rule.Pos())
			j := strings.Index(out[pos:], e.Text)
			if i < 0 || j < i {
				t.Fatalf("%s: %s missing or out of order:\n%s", format, e.Rule.Pos(), out)
			}
			pos += j + len(e.Text)
		}
	}
	if err := res.Render(&bytes.Buffer{}, "cursor"); err == nil {
		t.Error("unknown format accepted")
	}
}
