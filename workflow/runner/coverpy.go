package runner

import (
	_ "embed"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// pyCollector is the sitecustomize.py the verdict run puts first on
// PYTHONPATH (pyDir): it traces the changed files named in
// SMOLVM_PYCOV_FILES in every python3 the test command starts and
// writes what ran to pyOut.
//
//go:embed pycov/sitecustomize.py
var pyCollector string

const (
	pyDir = "/tmp/smolvm-pycov"
	pyOut = "python" // in covDir
)

// runsPython is a test command that starts python: python3 -m pytest,
// -m unittest, pytest, a script under python.
var runsPython = lazyre.New(`(^|[^\w.-])(python[0-9.]*|pytest)($|[^\w.-])`)

// pyCoverCommand is test with the collector on PYTHONPATH (ahead of what
// the environment has there), measuring files (repository paths), when
// test runs python and a Python file changed.
func pyCoverCommand(test string, files []string) (string, []string, bool) {
	if !runsPython().MatchString(test) || len(files) == 0 {
		return test, nil, false
	}
	abs := make([]string, len(files))
	for i, f := range files {
		abs[i] = path.Join(Dir, f)
	}
	env := []string{"SMOLVM_PYCOV=" + covDir + "/" + pyOut, "SMOLVM_PYCOV_FILES=" + strings.Join(abs, "\n")}
	return "export PYTHONPATH=" + pyDir + "${PYTHONPATH:+:$PYTHONPATH}; " + test, env, true
}

func pyFile(name string) bool { return path.Ext(name) == ".py" }

// pyLines is what the collector saw of one file: the lines run, and the
// lines that hold code (nil when the file did not compile).
type pyLines struct {
	Executed []int `json:"executed"`
	Code     []int `json:"code"`
}

// readPyLines merges the collector's files in dir (one per python
// process) by repository path; nil when no python wrote one.
func readPyLines(dir string) map[string]pyLines { return readPyLinesUnder(dir, Dir) }

// readPyLinesUnder is readPyLines for a repository at root.
func readPyLinesUnder(dir, root string) map[string]pyLines {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	cov := map[string]pyLines{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var doc map[string]pyLines
		if json.Unmarshal(data, &doc) != nil {
			continue
		}
		for name, l := range doc {
			rel, ok := strings.CutPrefix(name, root+"/")
			if !ok {
				continue
			}
			have := cov[rel]
			have.Executed = append(have.Executed, l.Executed...)
			if l.Code != nil {
				have.Code = append(have.Code, l.Code...)
			}
			cov[rel] = have
		}
	}
	if len(cov) == 0 {
		return nil
	}
	for rel, l := range cov {
		slices.Sort(l.Executed)
		slices.Sort(l.Code)
		cov[rel] = pyLines{slices.Compact(l.Executed), slices.Compact(l.Code)}
	}
	return cov
}

// line says whether line n ran: a line that holds no code (a comment, an
// else:, a bracket closing a call) is not counted; without the code
// lines (the file did not compile), any line but a comment is.
func (l pyLines) line(src []byte, n int) lineRun {
	if _, ok := slices.BinarySearch(l.Executed, n); ok {
		return ran
	}
	if l.Code != nil {
		if _, ok := slices.BinarySearch(l.Code, n); !ok {
			return noCode
		}
		return notRun
	}
	lines := strings.Split(string(src), "\n")
	if n <= len(lines) && strings.HasPrefix(strings.TrimSpace(lines[n-1]), "#") {
		return noCode
	}
	return notRun
}
