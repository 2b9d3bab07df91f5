// Package testparse turns the output of a test command (go test -json,
// pytest, python3 -m unittest, JUnit XML, TAP from node --test, jest
// --json, or a bare exit status) into one Result.
package testparse

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Status is how one test ended.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
	// XFail is pytest's expected failure: counted as skipped, but told
	// apart because SWE-bench's harness counts it as passed.
	XFail Status = "xfail"
)

// Test is one test case and, when it failed, what it printed.
type Test struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Output string `json:"output,omitempty"`
}

// Result is what one run of a test command showed.
type Result struct {
	Format  string `json:"format"` // the parser that read it
	Exit    int    `json:"exit"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	Tests   []Test `json:"tests,omitempty"`
	// Failure is the failure text to show an agent: each failing test's
	// output, or the tail of the command's output when no test was named.
	Failure string `json:"failure,omitempty"`
}

// MaxFailure bounds Result.Failure, and MaxTestOutput each test's output:
// the agent needs the first assertion, not a megabyte of logs.
const (
	MaxFailure    = 16 << 10
	MaxTestOutput = 4 << 10
)

// Green reports whether the run passed: exit status 0 and no failed test.
func (r Result) Green() bool { return r.Exit == 0 && r.Failed == 0 }

// Failing returns the names of the failed tests, sorted.
func (r Result) Failing() []string {
	var names []string
	for _, t := range r.Tests {
		if t.Status == Fail {
			names = append(names, t.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Status returns the status of the named test, or "" when the run did not
// report it.
func (r Result) Status(name string) Status {
	for _, t := range r.Tests {
		if t.Name == name {
			return t.Status
		}
	}
	return ""
}

// Summary is one line for people: "3 passed, 1 failed, 0 skipped".
func (r Result) Summary() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", r.Passed, r.Failed, r.Skipped)
	if r.Exit != 0 && r.Failed == 0 {
		s += fmt.Sprintf(" (exit %d)", r.Exit)
	}
	return s
}

// Parse reads the output of a test command that exited with status exit.
// It recognizes the format from the output itself; whatever it cannot
// read is judged by the exit status, with the end of stderr (or stdout)
// as the failure.
func Parse(stdout, stderr []byte, exit int) Result {
	var r Result
	ok := false
	for _, p := range parsers {
		if r, ok = p.parse(stdout); ok {
			r.Format = p.name
			break
		}
	}
	if !ok {
		// python3 -m unittest reports on stderr.
		if r, ok = parseUnittest(stderr); ok {
			r.Format = "unittest"
		} else {
			r = Result{Format: "exit"}
		}
	}
	r.Exit = exit
	r.count()
	if r.Failed == 0 && exit != 0 {
		// A build error, a crash, a collection error: no test says so.
		out := stderr
		if len(bytes.TrimSpace(out)) == 0 {
			out = stdout
		}
		r.Failure = tail(fmt.Sprintf("test command exited with status %d:\n%s", exit, out), MaxFailure)
	} else if r.Failed > 0 {
		var b strings.Builder
		for _, t := range r.Tests {
			if t.Status == Fail {
				fmt.Fprintf(&b, "--- FAIL: %s\n%s\n", t.Name, strings.TrimRight(t.Output, "\n"))
			}
		}
		r.Failure = head(b.String(), MaxFailure)
	}
	return r
}

type parser struct {
	name  string
	parse func([]byte) (Result, bool)
}

// parsers are tried in order; each refuses output that is not its format.
var parsers = []parser{
	{"go-json", parseGoJSON},
	{"jest-json", parseJestJSON},
	{"junit", parseJUnit},
	{"tap", parseTAP},
	{"unittest", parseUnittest}, // before pytest: "FAILED (failures=1)" is no pytest summary
	{"pytest", parsePytest},
}

// count adds the named tests to what the parser counted without names
// (unittest's default output names only the failures).
func (r *Result) count() {
	for i, t := range r.Tests {
		r.Tests[i].Output = head(t.Output, MaxTestOutput)
		switch t.Status {
		case Pass:
			r.Passed++
		case Fail:
			r.Failed++
		case Skip, XFail:
			r.Skipped++
		}
	}
}

// head keeps the first n bytes of s, tail the last n.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (truncated)"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "(truncated) …\n" + s[len(s)-n:]
}

// tests keeps tests in first-seen order, by name.
type tests struct {
	list  []Test
	index map[string]int
}

func (ts *tests) get(name string) *Test {
	if ts.index == nil {
		ts.index = map[string]int{}
	}
	i, ok := ts.index[name]
	if !ok {
		i = len(ts.list)
		ts.index[name] = i
		ts.list = append(ts.list, Test{Name: name})
	}
	return &ts.list[i]
}
