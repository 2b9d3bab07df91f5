package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf16"

	"smolvm.dev/smolvm/workflow/runner/guard"
)

// covDir is where the verdict run's node processes write their V8
// coverage (NODE_V8_COVERAGE): any node the test command starts, npm
// test, node --test and its child per file, jest's workers alike.
const covDir = "/tmp/smolvm-coverage"

// covEnv goes with the verdict run: it costs node little and nothing
// else reads it.
var covEnv = []string{"NODE_V8_COVERAGE=" + covDir}

// Coverage is which changed lines the verdict run executed. Only
// JavaScript is measured (V8's block coverage, from NODE_V8_COVERAGE);
// changed lines in other languages are counted as not measured.
type Coverage struct {
	Tool     string   `json:"tool,omitempty"` // "node-v8"; empty: not measured
	Changed  int      `json:"changed"`        // changed lines measured (added, non-blank, in code files)
	Executed int      `json:"executed"`
	Missed   []string `json:"missed,omitempty"` // FILE:LINE of changed lines no test ran
	// NotMeasured counts the changed code lines in languages that are
	// not measured (Go, Python, …).
	NotMeasured int    `json:"not_measured,omitempty"`
	Note        string `json:"note,omitempty"`
}

// v8Range is a V8 coverage block: offsets in UTF-16 code units.
type v8Range struct {
	Start int `json:"startOffset"`
	End   int `json:"endOffset"`
	Count int `json:"count"`
}

// coverageData is, per repository path, each node process's blocks of
// that script.
type coverageData map[string][][]v8Range

// collectCoverage copies the verdict run's V8 coverage out of sb; empty
// when no node ran.
func (r *run) collectCoverage(ctx context.Context, sb string) coverageData {
	tmp, err := os.MkdirTemp(r.scr.dir, "coverage-")
	if err != nil {
		return nil
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "v8")
	if err := r.svc.CopyOut(ctx, sb, covDir, out); err != nil {
		return nil // no node ran: nothing was written
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.json"))
	cov := coverageData{}
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

// coverage measures which added lines of files' code hunks (as they are
// at commit) the verdict run executed.
func (r *run) coverage(ctx context.Context, commit string, files []guard.File, cov coverageData) (Coverage, error) {
	c := Coverage{}
	if len(cov) > 0 {
		c.Tool = "node-v8"
	}
	for _, f := range files {
		if f.Deleted || f.Binary || r.policy.IsTest(f.Path) {
			continue
		}
		var lines []int
		for _, h := range f.Hunks {
			lines = append(lines, h.Added()...)
		}
		if len(lines) == 0 {
			continue
		}
		data, err := r.scr.file(ctx, commit, f.Path)
		if err != nil {
			return c, err
		}
		text := strings.Split(string(data), "\n")
		for _, n := range lines {
			if n > len(text) || strings.TrimSpace(text[n-1]) == "" {
				continue
			}
			if c.Tool == "" || !jsFile(f.Path) {
				c.NotMeasured++
				continue
			}
			c.Changed++
			if executed(cov[f.Path], string(data), n) {
				c.Executed++
			} else {
				c.Missed = append(c.Missed, fmt.Sprintf("%s:%d", f.Path, n))
			}
		}
	}
	switch {
	case c.Tool == "":
		c.Note = "not measured: no node process ran the tests (coverage is measured for JavaScript through NODE_V8_COVERAGE; Go, Python and others are not measured)"
	case c.NotMeasured > 0:
		c.Note = fmt.Sprintf("%d changed line(s) outside JavaScript not measured", c.NotMeasured)
	}
	return c, nil
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
