package guard

import (
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
		case inHunk && strings.HasPrefix(l, "-"):
			f.Removed = append(f.Removed, l[1:])
		case inHunk && strings.HasPrefix(l, "+"):
			f.Added = append(f.Added, l[1:])
		}
	}
	for i := range files {
		if files[i].Deleted {
			files[i].Path = files[i].OldPath
		}
	}
	return files
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
