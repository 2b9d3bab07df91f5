package rules

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// DefaultMaxFile is the size above which a single rule file draws a warning.
const DefaultMaxFile = 16 << 10

// LintOptions sets the size limits that Lint checks.
type LintOptions struct {
	Budget  int // a file larger than this can never be included whole: error
	MaxFile int // a file larger than this is a warning
}

// Lint returns every problem with the repository's rule files: those met
// while loading, oversized files and conflicting rules, sorted by file.
func (repo *Repo) Lint(opts LintOptions) []Finding {
	out := append([]Finding{}, repo.Findings...) // [] in JSON when clean
	for file, size := range repo.Sizes {
		switch {
		case opts.Budget > 0 && size > opts.Budget:
			out = append(out, Finding{Error, "file-over-budget", file, 0,
				fmt.Sprintf("%d bytes is over the budget of %d bytes: it is always truncated", size, opts.Budget)})
		case opts.MaxFile > 0 && size > opts.MaxFile:
			out = append(out, Finding{Warning, "file-too-large", file, 0,
				fmt.Sprintf("%d bytes is over the limit of %d bytes for one file", size, opts.MaxFile)})
		}
	}
	out = append(out, repo.conflicts()...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Code, b.Code)) < 0
	})
	return out
}

// topic is a point on which rules can be checked against each other: a
// repository has one answer to it, so two rules naming different choices
// contradict each other.
type topic struct {
	name    string
	choices []choice
}

type choice struct {
	name string
	re   func() *regexp.Regexp
	// context, when set, must also match the clause: it keeps common
	// words such as "black" from counting outside talk of formatting.
	context func() *regexp.Regexp
}

func ci(expr string) func() *regexp.Regexp { return lazyre.New(`(?i)` + expr) }

var topics = []topic{
	{"test command", []choice{
		{"go test", ci(`\bgo test\b`), nil},
		{"make test", ci(`\bmake (test|check)\b`), nil},
		{"the package.json test script", ci(`\b(npm|pnpm|yarn|bun) (run )?test\b`), nil},
		{"pytest", ci(`\bpytest\b`), nil},
		{"unittest", ci(`\bunittest\b`), nil},
		{"cargo test", ci(`\bcargo (test|nextest)\b`), nil},
		{"tox", ci(`\btox\b`), nil},
		{"bazel test", ci(`\bbazel test\b`), nil},
	}},
	// The package.json test script usually runs one of these, so they
	// are a topic of their own rather than rivals of "npm test".
	{"JavaScript test runner", []choice{
		{"jest", ci(`\bjest\b`), nil},
		{"vitest", ci(`\bvitest\b`), nil},
		{"mocha", ci(`\bmocha\b`), nil},
	}},
	{"JavaScript package manager", []choice{
		{"npm", ci(`\bnpm\b`), nil},
		{"pnpm", ci(`\bpnpm\b`), nil},
		{"yarn", ci(`\byarn\b`), nil},
		{"bun", ci(`\bbun\b`), nil},
	}},
	{"Python package manager", []choice{
		{"pip", ci(`\bpip3?\b`), nil},
		{"poetry", ci(`\bpoetry\b`), nil},
		{"uv", ci(`\buv\b`), nil},
		{"pipenv", ci(`\bpipenv\b`), nil},
		{"pdm", ci(`\bpdm\b`), nil},
		{"conda", ci(`\b(conda|mamba)\b`), nil},
	}},
	{"JavaScript formatter", []choice{
		{"prettier", ci(`\bprettier\b`), nil},
		{"biome", ci(`\bbiome\b`), nil},
		{"dprint", ci(`\bdprint\b`), nil},
		{"deno fmt", ci(`\bdeno fmt\b`), nil},
	}},
	{"Python formatter", []choice{
		{"black", ci(`\bblack\b`), ci("format|`black")},
		{"ruff format", ci(`\bruff format\b`), nil},
		{"yapf", ci(`\byapf\b`), nil},
		{"autopep8", ci(`\bautopep8\b`), nil},
	}},
	{"Go formatter", []choice{
		{"gofmt", ci(`\bgofmt\b`), nil},
		{"gofumpt", ci(`\bgofumpt\b`), nil},
	}},
}

var (
	clauseSep = ci(`[.,:!?]\s|[;()]|\bbut\b|\s[-–—]\s`)
	// negation before a choice in its clause means the rule rejects it:
	// "use pnpm, not npm", "prefer ruff format over black".
	negation = ci(`\b(not|never|no|avoid|without|instead of|rather than|no longer|stop using|over|except)\b|n't\b|\bdont\b`)
	// uvPip is uv's pip interface, which is uv and not pip.
	uvPip = ci(`\buv pip\b`)
)

// claim is a choice that a rule makes on a topic, at a line of its source.
type claim struct {
	choice string
	line   int
}

// claims returns, per topic index, the choices r asserts and does not reject.
func claims(r *Rule) map[int][]claim {
	out := map[int][]claim{}
	for i, line := range strings.Split(r.Text, "\n") {
		line = uvPip().ReplaceAllString(line, "uv")
		for _, clause := range splitClauses(line) {
			for ti, t := range topics {
				for _, c := range t.choices {
					if c.context != nil && !c.context().MatchString(line) {
						continue
					}
					for _, m := range c.re().FindAllStringIndex(clause, -1) {
						if negation().MatchString(clause[:m[0]]) {
							continue
						}
						if !slices.ContainsFunc(out[ti], func(cl claim) bool { return cl.choice == c.name }) {
							out[ti] = append(out[ti], claim{c.name, r.Line + i})
						}
					}
				}
			}
		}
	}
	return out
}

func splitClauses(line string) []string {
	var out []string
	start := 0
	for _, m := range clauseSep().FindAllStringIndex(line, -1) {
		out = append(out, line[start:m[0]])
		start = m[1]
	}
	return append(out, line[start:])
}

// conflicts finds pairs of rules that both apply to some file and make
// different choices on a topic.
func (repo *Repo) conflicts() []Finding {
	type ruleClaims struct {
		r      *Rule
		claims map[int][]claim
	}
	var rs []ruleClaims
	seen := map[string]bool{} // the same text twice (often a CLAUDE.md importing AGENTS.md) is one rule
	for i := range repo.Rules {
		r := &repo.Rules[i]
		if (r.Activation == Always || r.Activation == Glob) && r.OverriddenBy == "" && !seen[r.Hash] {
			seen[r.Hash] = true
			if c := claims(r); len(c) > 0 {
				rs = append(rs, ruleClaims{r, c})
			}
		}
	}
	var out []Finding
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			where := ""
			for ti, t := range topics {
				ca, cb := a.claims[ti], b.claims[ti]
				if len(ca) == 0 || len(cb) == 0 || sharesChoice(ca, cb) {
					continue
				}
				if where == "" {
					if where = repo.overlap(a.r, b.r); where == "" {
						break
					}
				}
				// b comes later, so it takes precedence: report it there.
				out = append(out, Finding{Error, "conflict", b.r.Source, cb[0].line, fmt.Sprintf(
					"conflicting %s: %s at %s:%d vs %s at %s:%d; both apply to %s, and %s takes precedence",
					t.name, choiceNames(ca), a.r.Source, ca[0].line, choiceNames(cb), b.r.Source, cb[0].line,
					where, b.r.Source)})
			}
		}
	}
	return out
}

func sharesChoice(a, b []claim) bool {
	for _, x := range a {
		for _, y := range b {
			if x.choice == y.choice {
				return true
			}
		}
	}
	return false
}

func choiceNames(cs []claim) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = fmt.Sprintf("%q", c.choice)
	}
	return strings.Join(names, " and ")
}

// overlap describes where both rules apply, or returns "" when no file is
// in scope of both.
func (repo *Repo) overlap(a, b *Rule) string {
	if a.Activation == Always && b.Activation == Always {
		switch {
		case a.Dir == b.Dir || covers(a.Dir, b.Dir):
			return dirFiles(b.Dir)
		case covers(b.Dir, a.Dir):
			return dirFiles(a.Dir)
		}
		return ""
	}
	for _, f := range repo.Files {
		if a.applies(f) && b.applies(f) {
			return f
		}
	}
	return ""
}

func dirFiles(dir string) string {
	if dir == "." {
		return "every file"
	}
	return "files under " + dir + "/"
}

// applies reports whether r is given to an agent up front for file.
func (r *Rule) applies(file string) bool {
	switch r.Activation {
	case Always:
		return covers(r.Dir, file)
	case Glob:
		_, ok := r.matchingGlob(file)
		return ok
	}
	return false
}
