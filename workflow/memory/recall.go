package memory

import (
	"fmt"
	"os"
	"path"
	"strings"
	"unicode"
)

// Recall ranking, best first:
//
//	100      an anchor is the path itself
//	 80      a directory anchor is the path's directory
//	 70..40  a directory anchor is a further ancestor (10 less per level)
//	 60      the path is a directory and an anchor lies inside it
//	 50      an anchor is a file in the same directory
//	 1..40   text query: share of query words found in the fact's text,
//	         kind and anchors (30), plus 10 when the whole query appears
//
// Ties go to the newer fact.
const (
	scoreExact   = 100
	scoreDir     = 80
	scoreInside  = 60
	scoreSibling = 50
	scoreMinUp   = 40
	scoreText    = 30
	scorePhrase  = 10
)

// recallPath decides whether q is a path: it exists, or a fact is anchored
// at or under it.
func (r *Repo) recallPath(base, q string, facts []*Fact) (string, bool) {
	p, err := r.Rel(base, q)
	if err != nil {
		return "", false
	}
	if _, err := os.Stat(r.abs(p)); err == nil {
		return p, true
	}
	for _, f := range facts {
		for _, a := range f.Anchors {
			if under(a.Path, p) {
				return p, true
			}
		}
	}
	return "", false
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

func depth(p string) int {
	if p == "." {
		return 0
	}
	return strings.Count(p, "/") + 1
}

func (r *Repo) isDir(p string) bool {
	info, err := os.Stat(r.abs(p))
	return err == nil && info.IsDir()
}

// pathScore ranks f by its best anchor relative to path p.
func (r *Repo) pathScore(f *Fact, p string) Match {
	var best Match
	pDir := r.isDir(p)
	dir := p
	if !pDir {
		dir = path.Dir(p)
	}
	for _, a := range f.Anchors {
		var m Match
		aDir := r.isDir(a.Path)
		switch {
		case a.Path == p:
			m = Match{Score: scoreExact, Reason: "anchored to " + p}
		case aDir && a.Path == dir:
			m = Match{Score: scoreDir, Reason: "anchored to its directory " + dir}
		case aDir && under(p, a.Path):
			up := depth(dir) - depth(a.Path)
			m = Match{Score: max(scoreMinUp, scoreDir-10*up), Reason: "anchored to ancestor directory " + a.Path}
		case pDir && under(a.Path, p):
			m = Match{Score: scoreInside, Reason: "anchored inside " + p + " at " + a.String()}
		case !pDir && path.Dir(a.Path) == dir:
			m = Match{Score: scoreSibling, Reason: "anchored in the same directory at " + a.String()}
		}
		if m.Score > best.Score {
			best = m
		}
	}
	return best
}

// textScore ranks f by how many of q's words it contains; a query word
// matches any word it is a prefix of.
func textScore(f *Fact, q string) Match {
	terms := words(q)
	if len(terms) == 0 {
		return Match{}
	}
	hay := f.Text + " " + string(f.Kind)
	for _, a := range f.Anchors {
		hay += " " + a.String()
	}
	have := words(hay)
	n := 0
	for _, t := range terms {
		for _, w := range have {
			if strings.HasPrefix(w, t) {
				n++
				break
			}
		}
	}
	if n == 0 {
		return Match{}
	}
	m := Match{
		Score:  max(1, scoreText*n/len(terms)),
		Reason: fmt.Sprintf("text match %d/%d words", n, len(terms)),
	}
	if strings.Contains(strings.ToLower(f.Text), strings.ToLower(strings.TrimSpace(q))) {
		m.Score += scorePhrase
		m.Reason += " and phrase"
	}
	return m
}

// words returns the distinct lower-case words of s.
func words(s string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}
