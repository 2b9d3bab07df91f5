package runner

import (
	"regexp"
	"slices"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// Test runners that select tests by name, found in a test command: the
// match's end (or group 1's, for node) is where the selection goes.
var (
	goTestCmd = lazyre.New(`(?:^|[\s;&|(])go\s+test\b`)
	nodeTest  = lazyre.New(`(?:^|[\s;&|(])node(?:\s+-\S+)*?\s+(--test)(?:\s|$)`)
	pytestCmd = lazyre.New(`(?:^|[\s;&|(])(?:python3?\s+-m\s+)?pytest(?:\s+(.*))?$`)
	// A go test -json name is PACKAGE.TestName[/subtest…]; the package
	// path may hold dots (gopkg.in/yaml.v3), a test function's name not.
	goTestName = lazyre.New(`\.((?:Test|Example|Fuzz)\w*)(?:/|$)`)
)

// pytest options that take a value as the next word.
var pytestValued = []string{"-k", "-m", "-p", "-o", "-c", "-W", "-n", "--rootdir", "--ignore", "--deselect", "--confcutdir", "--basetemp", "--tb", "-r"}

// narrow returns the test command cut down to the named tests, for the
// runners that can select tests by name (go test -run, node --test
// --test-name-pattern, pytest node IDs); ok is false when it cannot (the
// plain exit-code parser, jest, a name that is no test), and the whole
// command must run. Subtests select their top-level test.
func narrow(cmd, format string, names []string) (string, bool) {
	if len(names) == 0 {
		return "", false
	}
	switch format {
	case "go-json":
		loc := goTestCmd().FindStringIndex(cmd)
		if loc == nil {
			return "", false
		}
		var funcs []string
		for _, n := range names {
			m := goTestName().FindStringSubmatch(n)
			if m == nil {
				return "", false // a package that failed to build, or died
			}
			if !slices.Contains(funcs, m[1]) {
				funcs = append(funcs, m[1])
			}
		}
		return cmd[:loc[1]] + " -run " + shellQuote("^("+strings.Join(funcs, "|")+")$") + cmd[loc[1]:], true
	case "tap":
		loc := nodeTest().FindStringSubmatchIndex(cmd)
		if loc == nil {
			return "", false
		}
		var pats []string
		for _, n := range names {
			top, _, _ := strings.Cut(n, " > ")
			p := " --test-name-pattern=" + shellQuote("^"+regexp.QuoteMeta(top)+"$")
			if !slices.Contains(pats, p) {
				pats = append(pats, p)
			}
		}
		return cmd[:loc[3]] + strings.Join(pats, "") + cmd[loc[3]:], true
	case "pytest":
		m := pytestCmd().FindStringSubmatch(cmd)
		if m == nil || strings.ContainsAny(m[1], ";&|<>()$`'\"\\") {
			return "", false
		}
		// Only options may follow: a path given there would be run
		// whole besides the node IDs.
		words := strings.Fields(m[1])
		for i, w := range words {
			if !strings.HasPrefix(w, "-") && (i == 0 || !slices.Contains(pytestValued, words[i-1])) {
				return "", false
			}
		}
		var b strings.Builder
		b.WriteString(strings.TrimRight(cmd, " \t"))
		for _, n := range names {
			b.WriteString(" " + shellQuote(n))
		}
		return b.String(), true
	}
	return "", false
}

// shellQuote quotes s as one sh word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
