package testparse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"slices"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// goEvent is one line of go test -json (test2json), including the build
// events of Go 1.24 and later.
type goEvent struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

func parseGoJSON(out []byte) (Result, bool) {
	var ts tests
	seen := false
	pkgOut := map[string]*strings.Builder{}
	failedPkgs := []string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue // go vet and cgo chatter between events
		}
		var e goEvent
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			continue
		}
		seen = true
		switch {
		case e.Action == "build-output" || e.Action == "build-fail":
			k := "build " + e.ImportPath
			if pkgOut[k] == nil {
				pkgOut[k] = &strings.Builder{}
			}
			pkgOut[k].WriteString(e.Output)
			if e.Action == "build-fail" {
				failedPkgs = append(failedPkgs, k)
			}
		case e.Test == "":
			if pkgOut[e.Package] == nil {
				pkgOut[e.Package] = &strings.Builder{}
			}
			pkgOut[e.Package].WriteString(e.Output)
			if e.Action == "fail" {
				failedPkgs = append(failedPkgs, e.Package)
			}
		default:
			t := ts.get(e.Package + "." + e.Test)
			switch e.Action {
			case "output":
				t.Output += e.Output
			case "pass":
				t.Status = Pass
			case "fail":
				t.Status = Fail
			case "skip":
				t.Status = Skip
			}
		}
	}
	if !seen {
		return Result{}, false
	}
	list := leaves(ts.list, "/")
	// A package that failed with no failing test in it (a build error, a
	// panic in init, TestMain) is a failure of its own.
	for _, p := range failedPkgs {
		if !anyFailed(list, p+".") {
			list = append(list, Test{Name: p, Status: Fail, Output: pkgOut[p].String()})
		}
	}
	for i := range list {
		if list[i].Status == "" {
			// Started but never ended: the binary died (timeout, panic).
			list[i].Status = Fail
		}
	}
	return Result{Tests: list}, true
}

func anyFailed(list []Test, prefix string) bool {
	for _, t := range list {
		if t.Status == Fail && strings.HasPrefix(t.Name, prefix) {
			return true
		}
	}
	return false
}

// leaves drops the tests that have subtests (named NAME+sep+…): their
// subtests are counted instead, once.
func leaves(list []Test, sep string) []Test {
	var out []Test
	for _, t := range list {
		parent := false
		for _, u := range list {
			if strings.HasPrefix(u.Name, t.Name+sep) {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, t)
		} else if t.Status == Fail && !anyFailed(list, t.Name+sep) {
			// It failed itself (t.Error after its subtests passed).
			out = append(out, t)
		}
	}
	return out
}

// jest --json: {"testResults":[{"name":FILE,"assertionResults":[…]}]}.
type jestReport struct {
	NumTotalTests *int `json:"numTotalTests"`
	TestResults   []struct {
		Name             string `json:"name"`
		Message          string `json:"message"`
		Status           string `json:"status"`
		AssertionResults []struct {
			FullName        string   `json:"fullName"`
			Status          string   `json:"status"`
			FailureMessages []string `json:"failureMessages"`
		} `json:"assertionResults"`
	} `json:"testResults"`
}

func parseJestJSON(out []byte) (Result, bool) {
	i := bytes.Index(out, []byte(`{"num`))
	if i < 0 {
		return Result{}, false
	}
	var rep jestReport
	if json.NewDecoder(bytes.NewReader(out[i:])).Decode(&rep) != nil || rep.NumTotalTests == nil {
		return Result{}, false
	}
	var ts tests
	for _, f := range rep.TestResults {
		if len(f.AssertionResults) == 0 && f.Status == "failed" {
			// The file did not even load.
			t := ts.get(f.Name)
			t.Status, t.Output = Fail, f.Message
		}
		for _, a := range f.AssertionResults {
			t := ts.get(f.Name + " > " + a.FullName)
			switch a.Status {
			case "passed":
				t.Status = Pass
			case "failed":
				t.Status = Fail
				t.Output = strings.Join(a.FailureMessages, "\n")
			default: // pending, skipped, todo, disabled
				t.Status = Skip
			}
		}
	}
	return Result{Tests: ts.list}, true
}

type junitCase struct {
	Name      string `xml:"name,attr"`
	Classname string `xml:"classname,attr"`
	Failure   *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
	Skipped   *struct{} `xml:"skipped"`
	SystemOut string    `xml:"system-out"`
}

type junitSuite struct {
	Cases  []junitCase  `xml:"testcase"`
	Suites []junitSuite `xml:"testsuite"`
}

func parseJUnit(out []byte) (Result, bool) {
	i := bytes.Index(out, []byte("<testsuite"))
	if i < 0 {
		return Result{}, false
	}
	var root junitSuite
	// Both <testsuites> and a lone <testsuite> decode into junitSuite.
	if xml.Unmarshal(out[i:], &root) != nil {
		return Result{}, false
	}
	var ts tests
	var walk func(s junitSuite)
	walk = func(s junitSuite) {
		for _, c := range s.Cases {
			name := c.Name
			if c.Classname != "" {
				name = c.Classname + "::" + c.Name
			}
			t := ts.get(name)
			switch {
			case c.Failure != nil:
				t.Status, t.Output = Fail, joinNonEmpty(c.Failure.Message, c.Failure.Text)
			case c.Error != nil:
				t.Status, t.Output = Fail, joinNonEmpty(c.Error.Message, c.Error.Text)
			case c.Skipped != nil:
				t.Status = Skip
			default:
				t.Status = Pass
			}
		}
		for _, sub := range s.Suites {
			walk(sub)
		}
	}
	walk(root)
	return Result{Tests: ts.list}, len(ts.list) > 0 || bytes.Contains(out, []byte("<testsuite"))
}

func joinNonEmpty(a, b string) string {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == "" || strings.Contains(b, a) {
		return b
	}
	if b == "" {
		return a
	}
	return a + "\n" + b
}

var tapSubtest = lazyre.New(`^(\s*)# Subtest: (.*)$`)

var tapPoint = lazyre.New(`^(\s*)(not ok|ok)\b\s*\d*\s*(?:-\s*)?(.*?)(?:\s+#\s*(SKIP|TODO)\b.*)?$`)

// parseTAP reads TAP (node --test's default reporter when not on a
// terminal, tap-spec producers). Suites (node's describe) are test points
// too, with "type: 'suite'" in their YAML block; they are left out.
func parseTAP(out []byte) (Result, bool) {
	lines := strings.Split(string(out), "\n")
	tap := false
	for _, l := range lines {
		if strings.HasPrefix(l, "TAP version") || strings.HasPrefix(strings.TrimSpace(l), "1..") {
			tap = true
			break
		}
	}
	if !tap {
		return Result{}, false
	}
	var ts tests
	var names []string // by indent depth: the "# Subtest:" names open there
	for i := 0; i < len(lines); i++ {
		if m := tapSubtest().FindStringSubmatch(lines[i]); m != nil {
			d := len(m[1]) / 4
			if len(names) > d {
				names = names[:d]
			}
			for len(names) < d {
				names = append(names, "")
			}
			names = append(names, m[2])
			continue
		}
		m := tapPoint().FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		depth := len(m[1]) / 4
		name := strings.TrimSpace(m[3])
		// The YAML diagnostic block, if any, follows at deeper indent.
		var yaml []string
		if i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "---" {
			for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "..."; i++ {
				yaml = append(yaml, strings.TrimPrefix(lines[i], m[1]+"  "))
			}
		}
		full := name
		if depth > 0 && len(names) >= depth {
			full = strings.Join(append(slices.Clone(names[:depth]), name), " > ")
		}
		if hasLine(yaml, "type: 'suite'") {
			continue
		}
		t := ts.get(full)
		switch {
		case m[4] != "":
			t.Status = Skip
		case m[2] == "ok":
			t.Status = Pass
		default:
			t.Status = Fail
			t.Output = strings.Join(yaml, "\n")
		}
	}
	return Result{Tests: ts.list}, true
}

func hasLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}

var (
	// -rA short summary: "PASSED tests/test_a.py::test_x",
	// "FAILED tests/test_a.py::test_y - AssertionError: …",
	// "SKIPPED [1] tests/test_a.py:9: reason".
	pySummary = lazyre.New(`^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(?:\[\d+\]\s+)?(\S+?)(?::\d+:)?(?:\s.*)?$`)
	// -v: "tests/test_a.py::test_x PASSED   [ 50%]".
	pyVerbose = lazyre.New(`^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b`)
	// "____ test_y ____" opens a failure's section.
	pySection = lazyre.New(`^_{3,} (?:ERROR at \w+ of )?(\S+?) _{3,}$`)
	pyBanner  = lazyre.New(`^={3,} .* ={3,}$`)
)

func parsePytest(out []byte) (Result, bool) {
	var ts tests
	sections := map[string]string{} // test function name → its traceback
	var cur string
	var sec strings.Builder
	flush := func() {
		if cur != "" {
			sections[cur] = sec.String()
		}
		cur = ""
		sec.Reset()
	}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimRight(l, "\r")
		if m := pySection().FindStringSubmatch(l); m != nil {
			flush()
			cur = m[1]
			continue
		}
		if pyBanner().MatchString(l) {
			flush()
			continue
		}
		if cur != "" {
			sec.WriteString(l + "\n")
			continue
		}
		var word, name string
		if m := pySummary().FindStringSubmatch(l); m != nil {
			word, name = m[1], m[2]
		} else if m := pyVerbose().FindStringSubmatch(l); m != nil {
			word, name = m[2], m[1]
		} else {
			continue
		}
		name = strings.TrimSuffix(name, ":")
		t := ts.get(name)
		switch word {
		case "PASSED", "XPASS":
			t.Status = Pass
		case "FAILED", "ERROR":
			t.Status = Fail
		case "XFAIL":
			t.Status = XFail
		default:
			t.Status = Skip
		}
	}
	flush()
	if len(ts.list) == 0 {
		return Result{}, false
	}
	for i, t := range ts.list {
		if t.Status != Fail {
			continue
		}
		// Sections are headed by the test's name without its file
		// ("test_y", "TestCls.test_y", "test_y[param]").
		_, fn, ok := strings.Cut(t.Name, "::")
		if !ok {
			fn = t.Name // a collection error names the file
		}
		short := fn[strings.LastIndex(fn, "::")+1:]
		if s, ok := sections[strings.ReplaceAll(fn, "::", ".")]; ok {
			ts.list[i].Output = s
		} else if s, ok := sections[short]; ok {
			ts.list[i].Output = s
		}
	}
	return Result{Tests: ts.list}, true
}
