// Package guard rejects an agent's diff that changes protected test files
// or deletes, skips or weakens tests, with a reason the agent can act on.
package guard

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/workflow/trust"
)

// Rule names what a violation broke.
type Rule string

const (
	Protected   Rule = "protected-test-file" // the policy's tests class does not allow the write
	RemovedTest Rule = "removed-test"        // a test function is gone
	Skipped     Rule = "skip-marker"         // a skip, xfail or .only was added
	Weakened    Rule = "weakened-assertion"  // assertions removed or loosened
	Snapshot    Rule = "snapshot-edited"     // a snapshot or golden file changed
	IgnoreFile  Rule = "ignore-file-edited"  // .gitignore/.gitattributes decide what a diff shows
	// PassesOnBase is the runner's semantic check, not a pattern: a test
	// that fails on the base code with the original test files passes
	// there with the agent's, whatever the language.
	PassesOnBase Rule = "passes-on-base"
)

// Violation is one reason a diff is refused.
type Violation struct {
	Rule   Rule   `json:"rule"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s (%s)", v.Path, v.Reason, v.Rule) }

// Options say what a diff is judged against.
type Options struct {
	// Policy classifies test files and decides whether they may be
	// written (its tests class); nil is trust.Default, which asks, and an
	// ask is a refusal here: no one is there to answer mid-loop.
	Policy *trust.Policy
	// AllowWeaken lets test changes through that delete, skip or weaken
	// tests (a task that is about the tests themselves).
	AllowWeaken bool
}

// Check returns every violation in diff (git diff output), by path.
func Check(diff string, o Options) []Violation {
	p := o.Policy
	if p == nil {
		p = trust.Default("/")
	}
	files := ParseDiff(diff)
	var vs []Violation
	add := func(r Rule, f File, format string, args ...any) {
		vs = append(vs, Violation{Rule: r, Path: f.Path, Reason: fmt.Sprintf(format, args...)})
	}
	// Test names and assertions may move between files: count across the
	// whole diff what went and what came.
	var allAdded, allRemoved []string
	for _, f := range files {
		allAdded = append(allAdded, f.Added...)
		allRemoved = append(allRemoved, f.Removed...)
	}
	added := testNames(allAdded)
	assertsGone := count(allRemoved, assertion) > count(allAdded, assertion)

	for _, f := range files {
		base := path.Base(f.Path)
		if base == ".gitignore" || base == ".gitattributes" || path.Base(f.OldPath) == ".gitignore" {
			add(IgnoreFile, f, "%s may not change: it decides which files the diff shows", base)
		}
		if isSnapshot(f.Path) || isSnapshot(f.OldPath) {
			if !o.AllowWeaken {
				add(Snapshot, f, "snapshot and golden files record the expected output; fix the code, not the expectation")
			}
			continue
		}
		test := p.IsTest(f.Path) || p.IsTest(f.OldPath)
		if test {
			d := p.Evaluate(trust.Action{Kind: trust.Write, Target: f.Path})
			if d.Outcome != trust.Allow {
				add(Protected, f, "test files are protected (policy: %s %s); fix the code under test instead", d.Outcome, d.RuleText())
			}
		}
		if o.AllowWeaken {
			continue
		}
		for _, name := range testNames(f.Removed) {
			if !slices.Contains(added, name) {
				add(RemovedTest, f, "test %s was removed", name)
			}
		}
		for _, m := range skipMarkers {
			if n, was := count(f.Added, m.re), count(f.Removed, m.re); n > was {
				add(Skipped, f, "adds %s", m.what)
			}
		}
		if !test && !hasTests(f) {
			continue
		}
		if n, was := count(f.Added, assertion), count(f.Removed, assertion); was > n && assertsGone {
			add(Weakened, f, "removes %d assertion(s)", was-n)
		}
		for _, l := range f.Added {
			for _, w := range weak {
				if w.re().MatchString(l) && !slices.ContainsFunc(f.Removed, w.re().MatchString) {
					add(Weakened, f, "loosens an assertion (%s): %s", w.what, strings.TrimSpace(l))
				}
			}
		}
	}
	return vs
}

// Feedback is the violations as a message for the agent.
func Feedback(vs []Violation) string {
	var b strings.Builder
	b.WriteString("Your change was rejected and rolled back. smolvm refuses diffs that touch protected tests or delete, skip or weaken them:\n")
	for _, v := range vs {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	b.WriteString("Make the failing tests pass by fixing the code under test.\n")
	return b.String()
}

var (
	goTest = lazyre.New(`^\s*func\s+(Test\w*|Benchmark\w*|Fuzz\w*|Example\w*)\s*\(`)
	pyTest = lazyre.New(`^\s*(?:async\s+)?def\s+(test\w*)\s*\(`)
	pyCls  = lazyre.New(`^\s*class\s+(Test\w*)\b`)
	jsTest = lazyre.New(`\b(?:test|it)(?:\.\w+)?\s*\(\s*(['"` + "`" + `])(.+?)['"` + "`" + `]`)

	assertion = lazyre.New(`\bassert\w*\b|\bt\.(?:Error|Errorf|Fatal|Fatalf|Fail|FailNow)\b|\b(?:require|assert)\.\w+\(|\bexpect\s*\(|\bself\.assert\w+\(|\bpytest\.raises\b`)
)

func testNames(lines []string) []string {
	var names []string
	for _, l := range lines {
		for _, re := range []func() *regexp.Regexp{goTest, pyTest, pyCls} {
			if m := re().FindStringSubmatch(l); m != nil {
				names = append(names, m[1])
			}
		}
		if m := jsTest().FindStringSubmatch(l); m != nil {
			names = append(names, m[2])
		}
	}
	return names
}

// hasTests reports whether a file outside the test globs still holds
// tests (a Python module with test functions, a Go file named oddly).
func hasTests(f File) bool {
	return len(testNames(f.Removed)) > 0 || len(testNames(f.Added)) > 0
}

type pattern struct {
	what string
	re   func() *regexp.Regexp
}

var skipMarkers = []pattern{
	{"t.Skip", lazyre.New(`\b\w+\.Skip(?:Now|f)?\(`)},
	{"a pytest skip mark", lazyre.New(`@pytest\.mark\.skip(?:if)?\b|\bpytest\.skip\(|@unittest\.skip\w*|\braise\s+(?:unittest\.)?SkipTest\b`)},
	{"an xfail mark", lazyre.New(`@pytest\.mark\.xfail\b|\bpytest\.xfail\(|@unittest\.expectedFailure\b`)},
	{"a .skip", lazyre.New(`\b(?:test|it|describe|suite)\.(?:skip|todo)\b|\b(?:xit|xdescribe|xtest)\s*\(|\{\s*skip\s*:`)},
	{"a .only (every other test stops running)", lazyre.New(`\b(?:test|it|describe|suite)\.only\b|\b(?:fit|fdescribe)\s*\(|\{\s*only\s*:`)},
}

// weak are assertion forms that pass whatever the code does.
var weak = []pattern{
	{"always true", lazyre.New(`\bassert\s+(?:True|1|not\s+False)\b\s*(?:,|$)|\bassertTrue\(\s*True\s*\)|\bor\s+True\b|\|\|\s*true\b`)},
	{"truthiness only", lazyre.New(`\.toBeTruthy\(\)|\.toBeDefined\(\)|\bassertIsNotNone\(|\bassert\s+\w+\s+is\s+not\s+None\s*$`)},
	{"comparison made lenient", lazyre.New(`\bassert\b[^=!<>]*(?:>=|<=)|pytest\.approx\([^)]*(?:rel|abs)\s*=\s*(?:[1-9]|0\.[1-9])`)},
	{"error discarded", lazyre.New(`\bexcept\s*(?:Exception|BaseException)?\s*:\s*pass\b|\bcontextlib\.suppress\(`)},
}

func count(lines []string, re func() *regexp.Regexp) int {
	n := 0
	for _, l := range lines {
		n += len(re().FindAllStringIndex(l, -1))
	}
	return n
}

func isSnapshot(p string) bool {
	if p == "" {
		return false
	}
	base := path.Base(p)
	return strings.Contains("/"+p, "/__snapshots__/") || strings.HasSuffix(base, ".snap") ||
		strings.Contains(base, ".golden") || strings.HasSuffix(base, ".approved.txt") ||
		strings.Contains("/"+p, "/golden/") || strings.Contains("/"+p, "/snapshots/")
}
