package rules

import (
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// globPattern turns a rule glob into a doublestar pattern relative to the
// rule's directory. Like .gitignore, a glob without a slash matches a file
// name at any depth, and a trailing slash means everything below.
func globPattern(g string) string {
	g = strings.TrimPrefix(g, "./")
	if strings.HasSuffix(g, "/") {
		g += "**"
	}
	if !strings.Contains(strings.TrimSuffix(g, "/**"), "/") && !strings.HasPrefix(g, "**") {
		return "**/" + g
	}
	return strings.TrimPrefix(g, "/")
}

// validGlob reports whether doublestar can match with g.
func validGlob(g string) bool { return doublestar.ValidatePattern(globPattern(g)) }

// relTo returns file relative to dir, or false when file is not below dir.
// Both are clean slash paths relative to the repository root.
func relTo(dir, file string) (string, bool) {
	if dir == "." {
		return file, true
	}
	rest, ok := strings.CutPrefix(file, dir+"/")
	return rest, ok
}

// matchingGlob returns the first of r's globs that matches file, a clean
// slash path relative to the repository root.
func (r *Rule) matchingGlob(file string) (string, bool) {
	rel, ok := relTo(r.Dir, file)
	if !ok {
		return "", false
	}
	for _, g := range r.Globs {
		if ok, _ := doublestar.Match(globPattern(g), rel); ok {
			return g, true
		}
	}
	return "", false
}

// covers reports whether dir is file's directory or one of its ancestors.
func covers(dir, file string) bool {
	_, ok := relTo(dir, file)
	return ok
}

// depth counts the path elements of a directory; the root has depth 0.
func depth(dir string) int {
	if dir == "." {
		return 0
	}
	return strings.Count(path.Clean(dir), "/") + 1
}
