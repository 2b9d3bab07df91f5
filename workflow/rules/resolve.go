package rules

import (
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// DefaultBudget is the default byte budget for the rule text given to an
// agent for one file.
const DefaultBudget = 32 << 10

// Status is what happened to a rule in scope when resolving one file.
type Status string

const (
	Included  Status = "included"
	Truncated Status = "truncated" // included in part: the budget ran out
	Dropped   Status = "dropped"   // left out: the budget ran out
	Available Status = "available" // on-request or manual: never included up front
	Excluded  Status = "excluded"  // overridden, or the same text as an earlier rule
)

// Entry is one rule in scope for a file.
type Entry struct {
	Rule   *Rule  `json:"rule"`
	Status Status `json:"status"`
	Why    string `json:"why"`            // why the rule is in scope
	Note   string `json:"note,omitempty"` // why it was cut, left out or excluded
	Text   string `json:"text,omitempty"` // the part of Rule.Text given to the agent
}

// Resolution lists the rules for one file in precedence order: the
// context is their texts concatenated, and a later rule wins.
type Resolution struct {
	File    string  `json:"file"`
	Budget  int     `json:"budget"` // 0: unlimited
	Used    int     `json:"used"`   // bytes of rule text included
	Entries []Entry `json:"entries"`
}

// Rel turns p, absolute or relative to the working directory, into a
// slash path relative to the repository root.
func (repo *Repo) Rel(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", p, err)
	}
	rel, err := filepath.Rel(repo.Root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is outside the repository %s", p, repo.Root)
	}
	return filepath.ToSlash(rel), nil
}

// Resolve returns the rules that apply to an edit of file, a slash path
// relative to the root, cut to budget bytes of text (0 for no limit).
//
// The cut keeps the rules of highest precedence: walking from the last
// rule back, each rule is kept whole while it fits; the first one that
// does not is truncated at a line boundary, and every rule before it is
// dropped. The outcome depends only on the rules and the budget.
func (repo *Repo) Resolve(file string, budget int) *Resolution {
	file = path.Clean(file)
	res := &Resolution{File: file, Budget: budget, Entries: []Entry{}}
	seen := map[string]string{} // hash -> position of the first rule with that text
	for i := range repo.Rules {
		r := &repo.Rules[i]
		if !covers(r.Dir, file) {
			continue
		}
		e := Entry{Rule: r, Status: Included, Text: r.Text}
		switch r.Activation {
		case Always:
			e.Why = "always: " + dirWhy(r)
		case Glob:
			g, ok := r.matchingGlob(file)
			if !ok {
				continue
			}
			e.Why = fmt.Sprintf("glob %q", g)
			if r.Dir != "." {
				e.Why += " under " + r.Dir + "/"
			}
		case OnRequest:
			e.Status, e.Text = Available, ""
			e.Why = fmt.Sprintf("on request: the agent decides from the description %q", r.Description)
			e.Note = "not included up front"
		case Manual:
			e.Status, e.Text = Available, ""
			e.Why = fmt.Sprintf("manual: only when a user mentions @%s", r.Name)
			e.Note = "not included up front"
		}
		if r.ImportedBy != "" {
			e.Why += ", imported by " + r.ImportedBy
		}
		if e.Status == Included {
			if r.OverriddenBy != "" {
				e.Status, e.Text, e.Note = Excluded, "", "overridden by "+r.OverriddenBy
			} else if first, dup := seen[r.Hash]; dup {
				e.Status, e.Text, e.Note = Excluded, "", "same text as "+first
			} else {
				seen[r.Hash] = r.Pos()
			}
		}
		res.Entries = append(res.Entries, e)
	}
	res.cut()
	return res
}

func dirWhy(r *Rule) string {
	switch {
	case r.Tier == TierLegacy:
		return "legacy file at the repository root"
	case r.Dir == ".":
		return "repository root"
	}
	return "directory " + r.Dir + "/"
}

func (res *Resolution) cut() {
	left, full := res.Budget, false
	for i := len(res.Entries) - 1; i >= 0; i-- {
		e := &res.Entries[i]
		if e.Status != Included {
			continue
		}
		n := len(e.Text)
		switch {
		case res.Budget <= 0 || n <= left && !full:
			left -= n
		case !full && left > 0:
			full = true
			e.Text = truncate(e.Text, left)
			left -= len(e.Text)
			e.Status = Truncated
			e.Note = fmt.Sprintf("kept %d of %d bytes: the budget of %d bytes ran out", len(e.Text), n, res.Budget)
			if e.Text == "" {
				e.Status = Dropped
				e.Note = fmt.Sprintf("%d bytes: only %d bytes of the budget of %d were left", n, left, res.Budget)
			}
		default:
			full = true
			e.Status, e.Text = Dropped, ""
			e.Note = fmt.Sprintf("%d bytes: the budget of %d bytes is used up by rules of higher precedence", n, res.Budget)
		}
		res.Used += len(e.Text)
	}
}

// truncate cuts text to at most n bytes, at the last line break that fits
// or, failing that, at a character boundary.
func truncate(text string, n int) string {
	if len(text) <= n {
		return text
	}
	text = text[:n]
	if i := strings.LastIndexByte(text, '\n'); i > 0 {
		return strings.TrimRight(text[:i], "\n")
	}
	for len(text) > 0 && !utf8.ValidString(text) {
		text = text[:len(text)-1]
	}
	return text
}

// Count returns how many entries have status s.
func (res *Resolution) Count(s Status) int {
	n := 0
	for _, e := range res.Entries {
		if e.Status == s {
			n++
		}
	}
	return n
}

// Explain writes res for people: the rules given to the agent in order,
// then those cut by the budget, available on request and excluded.
func (res *Resolution) Explain(w io.Writer) error {
	var b strings.Builder
	in := res.Count(Included) + res.Count(Truncated)
	budget := "no budget"
	if res.Budget > 0 {
		budget = fmt.Sprintf("budget %d", res.Budget)
	}
	fmt.Fprintf(&b, "%s: %d rules, %d bytes (%s); later rules take precedence\n", res.File, in, res.Used, budget)
	n := 0
	for _, e := range res.Entries {
		if e.Status == Included || e.Status == Truncated {
			n++
			fmt.Fprintf(&b, "  %d. %s  %s  [%d bytes", n, e.Rule.Pos(), e.Why, len(e.Text))
			if e.Status == Truncated {
				fmt.Fprintf(&b, "; truncated: %s", e.Note)
			}
			fmt.Fprintln(&b, "]")
		}
	}
	for _, sec := range []struct {
		status Status
		title  string
	}{
		{Dropped, "dropped by the budget"},
		{Available, "available, not included"},
		{Excluded, "excluded"},
	} {
		if res.Count(sec.status) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", sec.title)
		for _, e := range res.Entries {
			if e.Status == sec.status {
				fmt.Fprintf(&b, "  - %s  %s  (%s)\n", e.Rule.Pos(), e.Why, e.Note)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
