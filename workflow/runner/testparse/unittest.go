package testparse

import (
	"strconv"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// python3 -m unittest writes to stderr. Verbose (-v) names every test:
// "test_x (mod.Cls.test_x) ... ok" (Python 3.11+; "test_x (mod.Cls)"
// before), a docstring's first line between the name and " ... ", and
// subtests indented with their parameters. The default output names only
// the failures (their "FAIL: name" sections); the rest are counted from
// "Ran N tests" and the closing "OK (skipped=1)" or "FAILED (...)".
var (
	utName    = lazyre.New(`^\s*(\w+) \(([\w.]+)\)((?: \(.*\))?)`)
	utStatus  = lazyre.New(` \.\.\. (ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success)$`)
	utSection = lazyre.New(`^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)((?: \(.*\))?)$`)
	utRan     = lazyre.New(`^Ran (\d+) tests? in `)
	utEnd     = lazyre.New(`^(OK|FAILED)(?: \((.*)\))?$`)
	utRule    = lazyre.New(`^(?:=|-){20,}$`)
)

// utID is a test's unittest ID (what python3 -m unittest selects it
// by): Python 3.11 prints it in the parentheses, older ones the class.
func utID(method, paren, sub string) string {
	id := paren
	if !strings.HasSuffix(paren, "."+method) {
		id += "." + method
	}
	return id + sub
}

func parseUnittest(out []byte) (Result, bool) {
	lines := strings.Split(strings.ReplaceAll(string(out), "\r", ""), "\n")
	ran, end := -1, ""
	for _, l := range lines {
		if m := utRan().FindStringSubmatch(l); m != nil {
			ran, _ = strconv.Atoi(m[1])
		} else if m := utEnd().FindStringSubmatch(l); m != nil && ran >= 0 {
			end = m[2]
		}
	}
	if ran < 0 {
		return Result{}, false
	}
	var ts tests
	verbose := utVerbose(lines, &ts)
	utSections(lines, &ts)
	r := Result{Tests: ts.list}
	if !verbose {
		// Only the failures are named: count the rest.
		n := utCounts(end)
		r.Skipped = n["skipped"] + n["expected failures"]
		r.Passed = max(ran-n["failures"]-n["errors"]-n["unexpected successes"]-r.Skipped, 0)
	}
	return r, true
}

// utVerbose reads -v lines into ts and says whether there were any.
func utVerbose(lines []string, ts *tests) bool {
	pending := ""
	seen := false
	for _, l := range lines {
		if utRule().MatchString(l) {
			break // the failure sections start
		}
		if m := utName().FindStringSubmatch(l); m != nil {
			pending = utID(m[1], m[2], m[3])
		}
		m := utStatus().FindStringSubmatch(l)
		if m == nil || pending == "" {
			continue
		}
		seen = true
		t := ts.get(pending)
		switch {
		case m[1] == "ok":
			t.Status = Pass
		case m[1] == "FAIL" || m[1] == "ERROR" || m[1] == "unexpected success":
			t.Status = Fail
		default:
			t.Status = Skip
		}
		pending = ""
	}
	return seen
}

// utSections marks the tests that head a failure section as failed, with
// the section (the traceback) as their output.
func utSections(lines []string, ts *tests) {
	for i := 0; i < len(lines); i++ {
		m := utSection().FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		var b strings.Builder
		j := i + 1
		if j < len(lines) && utRule().MatchString(lines[j]) {
			j++
		}
		for ; j < len(lines) && !utRule().MatchString(lines[j]); j++ {
			b.WriteString(lines[j] + "\n")
		}
		t := ts.get(utID(m[2], m[3], m[4]))
		t.Status, t.Output = Fail, strings.TrimRight(b.String(), "\n")
		i = j - 1
	}
}

// utCounts reads "failures=2, errors=1, skipped=1".
func utCounts(s string) map[string]int {
	n := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok {
			n[k], _ = strconv.Atoi(v)
		}
	}
	return n
}
