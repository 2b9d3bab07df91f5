// Package memory keeps a project memory of facts stored in the repository
// under .smolvm/memory, anchored to code and invalidated when that code drifts.
package memory

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Kind says what sort of knowledge a fact records.
type Kind string

const (
	Decision     Kind = "decision"
	Convention   Kind = "convention"
	Architecture Kind = "architecture"
	Gotcha       Kind = "gotcha"
)

// Kinds lists the valid kinds in the order the CLI documents them.
var Kinds = []Kind{Decision, Convention, Architecture, Gotcha}

func (k Kind) valid() bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

// Status is where a fact stands in its life cycle.
type Status string

const (
	Valid     Status = "valid"     // anchors match; returned by recall
	Stale     Status = "stale"     // an anchor drifted; needs confirm, edit or forget
	Proposed  Status = "proposed"  // written by an agent, awaiting review
	Rejected  Status = "rejected"  // a proposal turned down in review
	Forgotten Status = "forgotten" // invalidated on purpose; kept for history
)

func (s Status) valid() bool {
	switch s {
	case Valid, Stale, Proposed, Rejected, Forgotten:
		return true
	}
	return false
}

// Closed reports whether the fact has been retired for good.
func (s Status) Closed() bool { return s == Rejected || s == Forgotten }

// Anchor ties a fact to a path, optionally narrowed to a line range or a
// symbol, with the content hashes taken when the anchor was set.
type Anchor struct {
	Path    string `json:"path"`            // slash-separated, relative to the repository root
	Start   int    `json:"start,omitempty"` // 1-based inclusive line range; zero when unset
	End     int    `json:"end,omitempty"`
	Symbol  string `json:"symbol,omitempty"`
	Blob    string `json:"blob,omitempty"`     // git object id of the file (or tree for a directory)
	Hash    string `json:"hash,omitempty"`     // sha256 of the anchored lines or Go declaration
	Drift   string `json:"drift,omitempty"`    // why the anchor no longer matches; empty while it does
	MovedTo string `json:"moved_to,omitempty"` // the path a renamed anchor was found at
}

// anchorYAML is Anchor's file form: line ranges are written as "L1-L2".
type anchorYAML struct {
	Path   string `yaml:"path"`
	Lines  string `yaml:"lines,omitempty"`
	Symbol string `yaml:"symbol,omitempty"`
	Blob   string `yaml:"blob,omitempty"`
	Hash   string `yaml:"hash,omitempty"`
	Drift  string `yaml:"drift,omitempty"`
	Moved  string `yaml:"moved_to,omitempty"`
}

func (a Anchor) MarshalYAML() (any, error) {
	y := anchorYAML{Path: a.Path, Symbol: a.Symbol, Blob: a.Blob, Hash: a.Hash, Drift: a.Drift, Moved: a.MovedTo}
	if a.Start > 0 {
		y.Lines = fmt.Sprintf("%d-%d", a.Start, a.End)
	}
	return y, nil
}

func (a *Anchor) UnmarshalYAML(n *yaml.Node) error {
	var y anchorYAML
	if err := n.Decode(&y); err != nil {
		return err
	}
	*a = Anchor{Path: y.Path, Symbol: y.Symbol, Blob: y.Blob, Hash: y.Hash, Drift: y.Drift, MovedTo: y.Moved}
	if y.Lines != "" {
		var err error
		if a.Start, a.End, err = parseLines(y.Lines); err != nil {
			return err
		}
	}
	return nil
}

// ParseAnchor parses the command-line form PATH, PATH:L1-L2, PATH:L or
// PATH#Symbol, with PATH relative to the repository root. Hashes are filled
// in later, against the working tree.
func ParseAnchor(spec string) (Anchor, error) {
	a, err := splitAnchor(spec)
	if err != nil {
		return Anchor{}, err
	}
	if err := a.check(); err != nil {
		return Anchor{}, fmt.Errorf("anchor %q: %w", spec, err)
	}
	return a, nil
}

// splitAnchor separates a spec's line range or symbol from its path.
func splitAnchor(spec string) (Anchor, error) {
	var a Anchor
	p := spec
	if i := strings.LastIndexByte(p, '#'); i >= 0 {
		a.Symbol, p = p[i+1:], p[:i]
		if !isIdent(a.Symbol) {
			return Anchor{}, fmt.Errorf("anchor %q: symbol %q is not an identifier (want Name or Type.Method)", spec, a.Symbol)
		}
	} else if i := strings.LastIndexByte(p, ':'); i >= 0 && isDigit(p[i+1:]) {
		var err error
		if a.Start, a.End, err = parseLines(p[i+1:]); err != nil {
			return Anchor{}, fmt.Errorf("anchor %q: %w", spec, err)
		}
		p = p[:i]
	}
	a.Path = p
	return a, nil
}

// String returns the command-line form of the anchor.
func (a Anchor) String() string {
	switch {
	case a.Symbol != "":
		return a.Path + "#" + a.Symbol
	case a.Start > 0:
		return fmt.Sprintf("%s:%d-%d", a.Path, a.Start, a.End)
	}
	return a.Path
}

func (a Anchor) check() error {
	switch {
	case a.Path == "":
		return errors.New("empty path")
	case strings.ContainsAny(a.Path, "\\\x00\n"):
		return errors.New("path must be slash-separated, one line")
	case path.IsAbs(a.Path) || a.Path != path.Clean(a.Path) || a.Path == "." ||
		a.Path == ".." || strings.HasPrefix(a.Path, "../"):
		return fmt.Errorf("path %q must be clean and inside the repository", a.Path)
	case a.Start < 0 || a.End < a.Start || (a.Start == 0) != (a.End == 0):
		return fmt.Errorf("bad line range %d-%d", a.Start, a.End)
	case a.Symbol != "" && (a.Start > 0 || !isIdent(a.Symbol)):
		return fmt.Errorf("bad symbol %q", a.Symbol)
	case a.MovedTo != "":
		if err := (Anchor{Path: a.MovedTo}).check(); err != nil {
			return fmt.Errorf("moved_to: %w", err)
		}
	}
	return nil
}

// parseLines parses "L" or "L1-L2".
func parseLines(s string) (start, end int, err error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	start, err1 := strconv.Atoi(lo)
	end, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || start < 1 || end < start || end > 1<<24 {
		return 0, 0, fmt.Errorf("bad line range %q (want L1-L2 with 1 <= L1 <= L2)", s)
	}
	return start, end, nil
}

func isDigit(s string) bool {
	return s != "" && s[0] >= '0' && s[0] <= '9'
}

// isIdent accepts Name and Type.Method.
func isIdent(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for i, r := range p {
			letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
			if !letter && (i == 0 || r < '0' || r > '9') {
				return false
			}
		}
	}
	return true
}

// Event is one recorded change to a fact.
type Event struct {
	At     time.Time `yaml:"at" json:"at"`
	By     string    `yaml:"by" json:"by"`
	Action string    `yaml:"action" json:"action"`
	Why    string    `yaml:"why,omitempty" json:"why,omitempty"`
}

// Fact is one remembered piece of project knowledge. Its file is YAML
// frontmatter followed by the text as a Markdown body.
type Fact struct {
	ID            string    `yaml:"id" json:"id"`
	Kind          Kind      `yaml:"kind" json:"kind"`
	Status        Status    `yaml:"status" json:"status"`
	Author        string    `yaml:"author" json:"author"`
	CreatedAt     time.Time `yaml:"created_at" json:"created_at"`
	CreatedCommit string    `yaml:"created_commit,omitempty" json:"created_commit,omitempty"`
	ValidFrom     time.Time `yaml:"valid_from,omitempty" json:"valid_from,omitzero"`
	InvalidatedAt time.Time `yaml:"invalidated_at,omitempty" json:"invalidated_at,omitzero"`
	Reason        string    `yaml:"invalidated_reason,omitempty" json:"invalidated_reason,omitempty"`
	Supersedes    string    `yaml:"supersedes,omitempty" json:"supersedes,omitempty"`
	SupersededBy  string    `yaml:"superseded_by,omitempty" json:"superseded_by,omitempty"`
	Anchors       []Anchor  `yaml:"anchors,omitempty" json:"anchors,omitempty"`
	History       []Event   `yaml:"history" json:"history"`
	Text          string    `yaml:"-" json:"text"`
}

const fence = "---\n"

// ParseFact parses a fact file. Windows line endings are accepted so that a
// checkout with autocrlf still loads.
func ParseFact(data []byte) (*Fact, error) {
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	if !bytes.HasPrefix(data, []byte(fence)) {
		return nil, errors.New("missing frontmatter: file must start with ---")
	}
	rest := data[len(fence):]
	var front, body []byte
	if bytes.HasPrefix(rest, []byte(fence)) {
		body = rest[len(fence):]
	} else {
		i := bytes.Index(rest, []byte("\n"+fence))
		if i < 0 {
			return nil, errors.New("unterminated frontmatter: no closing ---")
		}
		front, body = rest[:i+1], rest[i+1+len(fence):]
	}
	var f Fact
	if err := yaml.Unmarshal(front, &f); err != nil {
		return nil, fmt.Errorf("frontmatter: %w", err)
	}
	f.Text = strings.TrimSpace(string(body))
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

// Marshal returns the fact's file content.
func (f *Fact) Marshal() ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(fence)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("encode fact %s: %w", f.ID, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode fact %s: %w", f.ID, err)
	}
	b.WriteString(fence + "\n" + f.Text + "\n")
	return b.Bytes(), nil
}

func (f *Fact) check() error {
	if !validID(f.ID) {
		return fmt.Errorf("bad fact id %q", f.ID)
	}
	if !f.Kind.valid() {
		return fmt.Errorf("fact %s: bad kind %q (want one of %v)", f.ID, f.Kind, Kinds)
	}
	if !f.Status.valid() {
		return fmt.Errorf("fact %s: bad status %q", f.ID, f.Status)
	}
	if err := checkActor(f.Author); err != nil {
		return fmt.Errorf("fact %s: author: %w", f.ID, err)
	}
	if strings.TrimSpace(f.Text) == "" || f.Text != strings.TrimSpace(f.Text) {
		return fmt.Errorf("fact %s: text must be non-empty and trimmed", f.ID)
	}
	for _, a := range f.Anchors {
		if err := a.check(); err != nil {
			return fmt.Errorf("fact %s: anchor: %w", f.ID, err)
		}
	}
	for _, id := range []string{f.Supersedes, f.SupersededBy} {
		if id != "" && !validID(id) {
			return fmt.Errorf("fact %s: bad fact id %q in supersedes/superseded_by", f.ID, id)
		}
	}
	return nil
}

// checkActor accepts "human:NAME" and "agent:NAME" on one line.
func checkActor(s string) error {
	kind, name, _ := strings.Cut(s, ":")
	if (kind != "human" && kind != "agent") || strings.TrimSpace(name) == "" || strings.ContainsAny(s, "\n\r") {
		return fmt.Errorf("%q must look like human:NAME or agent:NAME", s)
	}
	return nil
}

// record appends a history event.
func (f *Fact) record(at time.Time, by, action, why string) {
	f.History = append(f.History, Event{At: at, By: by, Action: action, Why: why})
}
