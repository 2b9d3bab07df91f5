package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"

	"smolvm.dev/smolvm/workflow/runner/guard"
)

// covDir is where the verdict run's tests write their coverage: node's
// V8 coverage (NODE_V8_COVERAGE: any node the test command starts, npm
// test, node --test and its child per file, jest's workers alike), go
// test's profile (goProfile) and the Python collector's files (pyOut).
const covDir = "/tmp/smolvm-coverage"

// covEnv goes with the verdict run: it costs node little and nothing
// else reads it.
var covEnv = []string{"NODE_V8_COVERAGE=" + covDir}

// Coverage is which changed lines the verdict run executed: JavaScript
// (V8's block coverage, from NODE_V8_COVERAGE), Go (go test's
// -coverprofile) and Python (a line tracer every python3 of the test
// command loads). Changed lines in other languages, or in a language the
// run measured nothing of, are counted as not measured.
type Coverage struct {
	// Tool names what measured, "+"-joined: "node-v8", "go-cover",
	// "python-trace"; empty: nothing was measured.
	Tool     string   `json:"tool,omitempty"`
	Changed  int      `json:"changed"` // changed lines measured (added, holding code, in code files)
	Executed int      `json:"executed"`
	Missed   []string `json:"missed,omitempty"` // FILE:LINE of changed lines no test ran
	// NotMeasured counts the changed code lines in languages that are
	// not measured.
	NotMeasured int    `json:"not_measured,omitempty"`
	Note        string `json:"note,omitempty"`
	// Files is the same per changed file that was measured, in the
	// diff's order.
	Files []FileCoverage `json:"files,omitempty"`
}

// FileCoverage is one changed file's measured lines.
type FileCoverage struct {
	File     string `json:"file"`
	Tool     string `json:"tool"`
	Changed  int    `json:"changed"`
	Executed int    `json:"executed"`
	Missed   []int  `json:"missed,omitempty"` // lines no test ran
}

// v8Range is a V8 coverage block: offsets in UTF-16 code units.
type v8Range struct {
	Start int `json:"startOffset"`
	End   int `json:"endOffset"`
	Count int `json:"count"`
}

// coverageData is what the verdict run measured, each by repository
// path; a nil map: that language was not measured.
type coverageData struct {
	node  map[string][][]v8Range // per node process, its blocks of the script
	gocov map[string][]goBlock   // go test's blocks of the file
	py    map[string]pyLines     // the Python collector's lines of the file
}

// collectCoverage copies the verdict run's coverage out of sb; empty
// when nothing measured.
func (r *run) collectCoverage(ctx context.Context, sb, commit string) coverageData {
	var cov coverageData
	tmp, err := os.MkdirTemp(r.scr.dir, "coverage-")
	if err != nil {
		return cov
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "cov")
	if err := r.svc.CopyOut(ctx, sb, covDir, out); err != nil {
		return cov // nothing ran that writes coverage
	}
	cov.node = readV8(out)
	cov.gocov = readGoProfile(filepath.Join(out, goProfile), r.goModule(ctx, commit))
	cov.py = readPyLines(filepath.Join(out, pyOut))
	return cov
}

// verdictCommand is the verdict run's command and environment: the test
// command measured where it can be, at no run of its own: node through
// covEnv, a plain go test with goCoverFlags, python with the collector
// (written into sb) tracing best's changed Python files.
func (r *run) verdictCommand(ctx context.Context, sb string, best Iteration) (string, []string, error) {
	test, env := r.o.Test, slices.Clone(covEnv)
	if cmd, ok := goCoverCommand(test); ok {
		// go test does not make the profile's directory; an empty
		// profile (the build failed) measures nothing.
		if err := r.svc.WriteFile(ctx, sb, covDir+"/"+goProfile, strings.NewReader("")); err != nil {
			return "", nil, fmt.Errorf("coverage: %w", err)
		}
		test = cmd
	}
	var py []string
	for _, f := range guard.ParseDiff(best.Diff) {
		if pyFile(f.Path) && !f.Deleted && !r.policy.IsTest(f.Path) && len(addedLines(f)) > 0 {
			py = append(py, f.Path)
		}
	}
	if cmd, pyEnv, ok := pyCoverCommand(test, py); ok {
		if err := r.svc.WriteFile(ctx, sb, pyDir+"/sitecustomize.py", strings.NewReader(pyCollector)); err != nil {
			return "", nil, fmt.Errorf("coverage: %w", err)
		}
		test, env = cmd, append(env, pyEnv...)
	}
	return test, env, nil
}

// readV8 reads node's coverage files in dir; nil when there are none.
func readV8(dir string) map[string][][]v8Range {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		return nil
	}
	cov := map[string][][]v8Range{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var doc struct {
			Result []struct {
				URL       string `json:"url"`
				Functions []struct {
					Ranges []v8Range `json:"ranges"`
				} `json:"functions"`
			} `json:"result"`
		}
		if json.Unmarshal(data, &doc) != nil {
			continue
		}
		for _, s := range doc.Result {
			rel, ok := strings.CutPrefix(s.URL, "file://"+Dir+"/")
			if !ok {
				continue // node's own modules, other directories
			}
			var blocks []v8Range
			for _, fn := range s.Functions {
				blocks = append(blocks, fn.Ranges...)
			}
			cov[rel] = append(cov[rel], blocks)
		}
	}
	if len(cov) == 0 {
		return nil // node ran none of the repository's scripts
	}
	return cov
}

// jsFile is what V8 coverage measures.
func jsFile(name string) bool {
	switch path.Ext(name) {
	case ".js", ".mjs", ".cjs":
		return true
	}
	return false
}

// lineRun is what coverage knows of one changed line.
type lineRun int

const (
	noCode lineRun = iota // the line holds no code the tool counts
	ran
	notRun
)

// measurer tells which lines of one file ran.
type measurer struct {
	tool string
	line func(n int) lineRun
}

// measurer is how the verdict run measured path (its text src at the
// commit), if it did.
func (c coverageData) measurer(path string, src []byte) (measurer, bool) {
	switch {
	case jsFile(path) && c.node != nil:
		return measurer{"node-v8", func(n int) lineRun { return ranIf(executed(c.node[path], string(src), n)) }}, true
	case goFile(path) && c.gocov != nil:
		blocks, ok := c.gocov[path]
		if !ok {
			return measurer{}, false // not in the tested build (build constraints, another module)
		}
		return measurer{"go-cover", func(n int) lineRun { return goLine(blocks, src, n) }}, true
	case pyFile(path) && c.py != nil:
		lines, ok := c.py[path]
		if !ok {
			return measurer{}, false
		}
		return measurer{"python-trace", func(n int) lineRun { return lines.line(src, n) }}, true
	}
	return measurer{}, false
}

func ranIf(ok bool) lineRun {
	if ok {
		return ran
	}
	return notRun
}

// coverage measures which added lines of files' code hunks (as they are
// at commit) the verdict run executed.
func (r *run) coverage(ctx context.Context, commit string, files []guard.File, cov coverageData) (Coverage, error) {
	c := Coverage{}
	tools := map[string]bool{}
	for _, f := range files {
		if f.Deleted || f.Binary || r.policy.IsTest(f.Path) {
			continue
		}
		lines := addedLines(f)
		if len(lines) == 0 {
			continue
		}
		data, err := r.scr.file(ctx, commit, f.Path)
		if err != nil {
			return c, err
		}
		m, measured := cov.measurer(f.Path, data)
		fc := FileCoverage{File: f.Path, Tool: m.tool}
		text := strings.Split(string(data), "\n")
		for _, n := range lines {
			if n > len(text) || strings.TrimSpace(text[n-1]) == "" {
				continue
			}
			if !measured {
				c.NotMeasured++
				continue
			}
			switch m.line(n) {
			case ran:
				fc.Changed++
				fc.Executed++
			case notRun:
				fc.Changed++
				fc.Missed = append(fc.Missed, n)
				c.Missed = append(c.Missed, fmt.Sprintf("%s:%d", f.Path, n))
			}
		}
		if measured {
			tools[m.tool] = true
			c.Changed += fc.Changed
			c.Executed += fc.Executed
			c.Files = append(c.Files, fc)
		}
	}
	for _, t := range []string{"node-v8", "go-cover", "python-trace"} {
		if tools[t] {
			c.Tool = strings.TrimPrefix(c.Tool+"+"+t, "+")
		}
	}
	switch {
	case c.Tool == "":
		c.Note = "not measured: the tests ran none of the changed code files' languages under coverage (measured: JavaScript through NODE_V8_COVERAGE, Go when the command is a plain go test, Python when it runs python3 or pytest)"
	case c.NotMeasured > 0:
		c.Note = fmt.Sprintf("%d changed line(s) not measured (other languages, or files the tests' build left out)", c.NotMeasured)
	}
	return c, nil
}

// addedLines are f's added lines, in order.
func addedLines(f guard.File) []int {
	var lines []int
	for _, h := range f.Hunks {
		lines = append(lines, h.Added()...)
	}
	return lines
}

// executed says whether any process ran line n (1-based) of src: the
// innermost block holding the line's first non-blank character has a
// count above 0. A script no process loaded ran nothing.
func executed(procs [][]v8Range, src string, n int) bool {
	at := lineOffset(src, n)
	for _, blocks := range procs {
		best := -1
		for i, b := range blocks {
			if b.Start <= at && at < b.End && (best < 0 || b.End-b.Start <= blocks[best].End-blocks[best].Start) {
				best = i
			}
		}
		if best >= 0 && blocks[best].Count > 0 {
			return true
		}
	}
	return false
}

// lineOffset is the UTF-16 offset of line n's first non-blank character.
func lineOffset(src string, n int) int {
	off, line := 0, 1
	for _, c := range src {
		if line == n && !unicode.IsSpace(c) {
			return off
		}
		if c == '\n' {
			line++
		}
		off += utf16.RuneLen(c)
	}
	return off
}
