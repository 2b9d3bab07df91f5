package runner

import (
	"bufio"
	"context"
	"os"
	"path"
	"strconv"
	"strings"
)

// goProfile is go test's coverage profile in covDir.
const goProfile = "go.cover"

// goCoverFlags go into a plain go test command on the verdict run: the
// profile covers every package of the module, not only the one a test
// binary tests.
var goCoverFlags = []string{"-coverprofile=" + covDir + "/" + goProfile, "-coverpkg=./..."}

// goCoverCommand is test with goCoverFlags after its "go test", when it
// is a plain go test invocation: environment assignments, go test, then
// words with no quoting, no shell operators and no coverage or
// compile-only flags of its own. Otherwise test is not measured.
func goCoverCommand(test string) (string, bool) {
	if strings.ContainsAny(test, ";&|<>()`'\"\\\n{}#") {
		return test, false
	}
	words := strings.Fields(test)
	i := 0
	for i < len(words) && envAssignment(words[i]) {
		i++
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "test" {
		return test, false
	}
	for _, w := range words[i+2:] {
		flag := strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-")
		if w == "-args" || w == "--args" {
			break // the rest goes to the test binary
		}
		if w[0] == '-' && (strings.HasPrefix(flag, "cover") || flag == "c" || strings.HasPrefix(flag, "o=") || flag == "o" ||
			strings.HasPrefix(flag, "list") || strings.HasPrefix(flag, "fuzz")) {
			return test, false
		}
	}
	out := append(append(append([]string{}, words[:i+2]...), goCoverFlags...), words[i+2:]...)
	return strings.Join(out, " "), true
}

// envAssignment is a shell word NAME=value.
func envAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for j, c := range name {
		if c != '_' && !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || j > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// goModule is the module path of the repository's go.mod at commit; ""
// when it has none.
func (r *run) goModule(ctx context.Context, commit string) string {
	data, err := r.scr.file(ctx, commit, "go.mod")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], "\"`")
		}
	}
	return ""
}

// goBlock is a block of a Go coverage profile: from line.col to
// line.col (the end column past the block), run count times.
type goBlock struct {
	StartLine, StartCol, EndLine, EndCol, Count int
}

// readGoProfile reads the profile at name (import path/file.go:
// start.col,end.col statements count per line) into blocks per
// repository path, the files of module only; nil without a profile.
func readGoProfile(name, module string) map[string][]goBlock {
	f, err := os.Open(name)
	if err != nil || module == "" {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "mode:") {
		return nil // go test stopped before writing it
	}
	cov := map[string][]goBlock{}
	for sc.Scan() {
		file, b, ok := parseGoBlock(sc.Text())
		if !ok {
			continue
		}
		if rel, ok := strings.CutPrefix(file, module+"/"); ok {
			cov[rel] = append(cov[rel], b)
		}
	}
	return cov
}

// parseGoBlock parses "file.go:3.24,5.2 1 1".
func parseGoBlock(line string) (string, goBlock, bool) {
	colon := strings.LastIndexByte(line, ':')
	if colon < 0 {
		return "", goBlock{}, false
	}
	var n [6]int
	fields := strings.FieldsFunc(line[colon+1:], func(c rune) bool { return c == '.' || c == ',' || c == ' ' })
	if len(fields) != 6 {
		return "", goBlock{}, false
	}
	for i, s := range fields {
		v, err := strconv.Atoi(s)
		if err != nil {
			return "", goBlock{}, false
		}
		n[i] = v
	}
	return line[:colon], goBlock{StartLine: n[0], StartCol: n[1], EndLine: n[2], EndCol: n[3], Count: n[5]}, true
}

func goFile(name string) bool { return path.Ext(name) == ".go" }

// goLine says whether line n of src ran: the blocks holding its first
// non-blank character (byte column, as the profile counts), or else the
// blocks that touch the line (a func line, whose body block starts at
// its brace); a line no block touches holds no statement.
func goLine(blocks []goBlock, src []byte, n int) lineRun {
	col := firstColumn(src, n)
	at := func(b goBlock) bool {
		return (b.StartLine < n || b.StartLine == n && b.StartCol <= col) && (n < b.EndLine || n == b.EndLine && col < b.EndCol)
	}
	touches := func(b goBlock) bool { return b.StartLine <= n && n <= b.EndLine }
	for _, in := range []func(goBlock) bool{at, touches} {
		found := lineRun(noCode)
		for _, b := range blocks {
			if in(b) {
				if b.Count > 0 {
					return ran
				}
				found = notRun
			}
		}
		if found != noCode {
			return found
		}
	}
	return noCode
}

// firstColumn is the 1-based byte column of line n's first non-blank
// character.
func firstColumn(src []byte, n int) int {
	lines := strings.SplitN(string(src), "\n", n+1)
	if n > len(lines) {
		return 1
	}
	l := lines[n-1]
	return len(l) - len(strings.TrimLeft(l, " \t")) + 1
}
