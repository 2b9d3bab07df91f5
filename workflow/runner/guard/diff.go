package guard

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// File is one file of a unified diff (git diff's format).
type File struct {
	Path    string // the new path; the old one for a deletion
	OldPath string // differs from Path for a rename
	New     bool
	Deleted bool
	Binary  bool
	Removed []string // lines taken away, without the leading '-'
	Added   []string // lines put in, without the leading '+'
	Hunks   []Hunk
}

// Hunk is one @@ section of a file's diff: where it sits on each side
// (1-based start, line count; a count of 0 starts after that line) and
// its lines, each with its ' ', '-', '+' or '\' prefix.
type Hunk struct {
	Header             string
	OldStart, OldLines int
	NewStart, NewLines int
	Lines              []string
}

// Added returns the new-side line numbers of the lines h puts in.
func (h Hunk) Added() []int {
	var out []int
	n := h.NewStart
	for _, l := range h.Lines {
		switch {
		case strings.HasPrefix(l, "+"):
			out = append(out, n)
			n++
		case strings.HasPrefix(l, " "):
			n++
		}
	}
	return out
}

// parseHunkHeader reads "@@ -a,b +c,d @@ …" (a count left out is 1).
func parseHunkHeader(l string) (Hunk, bool) {
	h := Hunk{Header: l}
	f := strings.Fields(l)
	if len(f) < 3 || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return h, false
	}
	var ok1, ok2 bool
	h.OldStart, h.OldLines, ok1 = span(f[1][1:])
	h.NewStart, h.NewLines, ok2 = span(f[2][1:])
	return h, ok1 && ok2
}

func span(s string) (start, lines int, ok bool) {
	a, b, has := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	lines = 1
	if has {
		var err2 error
		lines, err2 = strconv.Atoi(b)
		err = errors.Join(err, err2)
	}
	return start, lines, err == nil
}

// ParseDiff reads the output of git diff (with --no-ext-diff and
// --no-textconv, so that what it shows is what changed).
func ParseDiff(diff string) []File {
	var files []File
	var f *File
	inHunk := false
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "diff --git "):
			files = append(files, File{})
			f = &files[len(files)-1]
			inHunk = false
			a, b := splitGitHeader(strings.TrimPrefix(l, "diff --git "))
			f.OldPath, f.Path = a, b
		case f == nil:
		case !inHunk && strings.HasPrefix(l, "new file mode"):
			f.New = true
		case !inHunk && strings.HasPrefix(l, "deleted file mode"):
			f.Deleted = true
		case !inHunk && strings.HasPrefix(l, "rename from "):
			f.OldPath = unquote(strings.TrimPrefix(l, "rename from "))
		case !inHunk && strings.HasPrefix(l, "rename to "):
			f.Path = unquote(strings.TrimPrefix(l, "rename to "))
		case !inHunk && strings.HasPrefix(l, "Binary files "), strings.HasPrefix(l, "GIT binary patch"):
			f.Binary = true
		case !inHunk && (strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "+++ ")):
		case strings.HasPrefix(l, "@@"):
			inHunk = true
			if h, ok := parseHunkHeader(l); ok {
				f.Hunks = append(f.Hunks, h)
			}
		case inHunk && strings.HasPrefix(l, "-"):
			f.Removed = append(f.Removed, l[1:])
			f.addLine(l)
		case inHunk && strings.HasPrefix(l, "+"):
			f.Added = append(f.Added, l[1:])
			f.addLine(l)
		case inHunk && (strings.HasPrefix(l, " ") || strings.HasPrefix(l, `\`)):
			f.addLine(l)
		}
	}
	for i := range files {
		if files[i].Deleted {
			files[i].Path = files[i].OldPath
		}
	}
	return files
}

func (f *File) addLine(l string) {
	if len(f.Hunks) > 0 {
		h := &f.Hunks[len(f.Hunks)-1]
		h.Lines = append(h.Lines, l)
	}
}

// splitGitHeader splits "a/X b/Y" (either side possibly quoted).
func splitGitHeader(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		if q, err := strconv.QuotedPrefix(s); err == nil {
			return strip(unquote(q)), strip(unquote(strings.TrimSpace(s[len(q):])))
		}
	}
	// Unquoted paths have no spaces that matter here unless both halves
	// are equal (no rename), so split in the middle when it is symmetric.
	if i := strings.Index(s, " b/"); i >= 0 {
		return strip(s[:i]), strip(unquote(s[i+1:]))
	}
	return strip(s), strip(s)
}

func strip(p string) string {
	if len(p) > 2 && (p[:2] == "a/" || p[:2] == "b/") {
		return p[2:]
	}
	return p
}

func unquote(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

// Revert takes h back out of content, the file as it is after the diff:
// the hunk's new-side lines are replaced by its old-side ones. Other
// hunks of the file stay applied (they do not move h's new-side start).
func (h Hunk) Revert(content string) (string, error) {
	lines := strings.SplitAfter(content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	at := h.NewStart - 1
	if h.NewLines == 0 {
		at = h.NewStart // a count of 0 starts after that line
	}
	if at < 0 || at+h.NewLines > len(lines) {
		return "", fmt.Errorf("hunk %s lies outside the file's %d lines", h.Header, len(lines))
	}
	var old, now []string
	for i, l := range h.Lines {
		if l == "" || l[0] == '\\' {
			continue
		}
		text := l[1:]
		if i+1 >= len(h.Lines) || !strings.HasPrefix(h.Lines[i+1], `\`) {
			text += "\n" // "\ No newline at end of file" follows the last line only
		}
		if l[0] != '+' {
			old = append(old, text)
		}
		if l[0] != '-' {
			now = append(now, text)
		}
	}
	if got := strings.Join(lines[at:at+h.NewLines], ""); got != strings.Join(now, "") {
		return "", fmt.Errorf("hunk %s does not match the file", h.Header)
	}
	out := slices.Concat(lines[:at], old, lines[at+h.NewLines:])
	return strings.Join(out, ""), nil
}
