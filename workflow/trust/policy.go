// Package trust decides what an agent may do in a repository (allow, ask
// or deny each action) from the repository's .smolvm/policy.toml, and
// gates and audits those decisions.
package trust

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Outcome is what a rule decides. Stricter outcomes compare greater.
type Outcome int

const (
	Allow Outcome = iota + 1
	Ask
	Deny
)

func (o Outcome) String() string {
	switch o {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "unset"
}

// ParseOutcome parses "allow", "ask" or "deny".
func ParseOutcome(s string) (Outcome, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "ask":
		return Ask, nil
	case "deny":
		return Deny, nil
	}
	return 0, fmt.Errorf("unknown outcome %q (want allow, ask or deny)", s)
}

func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

func (o *Outcome) UnmarshalText(b []byte) error {
	v, err := ParseOutcome(string(b))
	*o = v
	return err
}

// Kind classifies actions.
type Kind string

const (
	Read   Kind = "read"       // read a file
	Write  Kind = "write"      // write a file (test files are their own class)
	Run    Kind = "run"        // run a command line
	Net    Kind = "net"        // connect to a host
	Commit Kind = "git-commit" // create a git commit
	Push   Kind = "git-push"   // push to a remote
	PR     Kind = "open-pr"    // open a pull request
	Memory Kind = "memory"     // change the agent's memory
)

// Action is something an agent wants to do.
type Action struct {
	Kind Kind `json:"kind"`
	// Target is the file (Read, Write), the shell command line (Run) or the
	// host, host:port or IP (Net). Git and memory actions have none.
	Target string `json:"target,omitempty"`
	// Argv, for Run, is a command exec'd without a shell; it replaces Target.
	Argv []string `json:"argv,omitempty"`
}

func (a Action) String() string {
	t := a.Target
	if a.Kind == Run && len(a.Argv) > 0 {
		t = quoteArgv(a.Argv)
	}
	if t == "" {
		return string(a.Kind)
	}
	return string(a.Kind) + " " + t
}

// Class is what a rule applies to. It is an action Kind, or Test for
// writes to test files.
type Class string

// Test is the class of writes to files matching the test globs.
const Test Class = "tests"

// Rule is one line of policy: for actions of Class whose target matches
// Pattern, decide Outcome.
type Rule struct {
	Class   Class   `json:"class"`
	Pattern string  `json:"pattern,omitempty"`
	Outcome Outcome `json:"outcome"`
	File    string  `json:"file"` // the policy file, or preset:NAME
	Line    int     `json:"line"`

	words []string // run rules: Pattern split into words
}

// Pos is where the rule was written, as file:line.
func (r *Rule) Pos() string { return fmt.Sprintf("%s:%d", r.File, r.Line) }

func (r *Rule) String() string {
	s := fmt.Sprintf("%s: %s %s", r.Pos(), r.Outcome, r.Class)
	if r.Pattern != "" {
		s += fmt.Sprintf(" %q", r.Pattern)
	}
	return s
}

// Policy is a parsed policy file with its preset expanded.
type Policy struct {
	Root    string // repository root; relative paths are relative to it
	File    string // the file it was read from; empty for the built-in default
	Preset  string
	Default Outcome // for actions no rule matches
	// Dynamic is the outcome for commands that cannot be resolved
	// statically. It is never Allow.
	Dynamic Outcome
	// TestGlobs classify writes as test writes.
	TestGlobs []string
	// Timeout bounds how long an ask waits for an answer.
	Timeout time.Duration
	Rules   []Rule
}

// DefaultTimeout is how long an ask waits when the policy does not say.
const DefaultTimeout = 5 * time.Minute

// Decision is the verdict on an action.
type Decision struct {
	Action  Action  `json:"action"`
	Outcome Outcome `json:"outcome"`
	// Rule decided; nil when the policy default did.
	Rule   *Rule  `json:"rule,omitempty"`
	Reason string `json:"reason"`
	// Parts holds one decision per part of a run action; the action's
	// outcome is the strictest of them.
	Parts []PartDecision `json:"parts,omitempty"`
}

// PartDecision is the verdict on one part of a command line.
type PartDecision struct {
	Part    Part    `json:"part"`
	Outcome Outcome `json:"outcome"`
	Rule    *Rule   `json:"rule,omitempty"`
	Reason  string  `json:"reason"`
}

// RuleText names the deciding rule for logs: its position and text, or
// "default".
func (d Decision) RuleText() string {
	if d.Rule == nil {
		return "default"
	}
	return d.Rule.String()
}

// Evaluate decides an action. It has no side effects; Gate records and
// enforces decisions.
func (p *Policy) Evaluate(a Action) Decision {
	d := Decision{Action: a}
	switch a.Kind {
	case Run:
		parts := SplitArgv(a.Argv)
		if len(a.Argv) == 0 {
			parts = Split(a.Target)
		}
		for i, part := range parts {
			pd := p.evalPart(part)
			d.Parts = append(d.Parts, pd)
			if i == 0 || pd.Outcome > d.Outcome {
				d.Outcome, d.Rule = pd.Outcome, pd.Rule
				d.Reason = pd.Reason
				if len(parts) > 1 {
					d.Reason = fmt.Sprintf("part %d (%s): %s", i+1, part, pd.Reason)
				}
			}
		}
		if len(parts) == 0 {
			// Nothing runs (an assignment, a comment): nothing to match.
			d.Outcome, d.Rule, d.Reason = p.pick(nil, "")
		}
	case Read, Write:
		d.Outcome, d.Rule, d.Reason = p.evalPath(a.Kind, a.Target)
	case Net:
		d.Outcome, d.Rule, d.Reason = p.evalNet(a.Target)
	case Commit, Push, PR, Memory:
		d.Outcome, d.Rule, d.Reason = p.pick(p.matching(Class(a.Kind), ""), "")
	default:
		d.Outcome, d.Reason = p.Dynamic, fmt.Sprintf("unknown action kind %q: treated as dynamic", a.Kind)
	}
	return d
}

func (p *Policy) evalPart(part Part) PartDecision {
	pd := PartDecision{Part: part}
	switch {
	case part.Dynamic != "":
		pd.Outcome = p.Dynamic
		pd.Reason = fmt.Sprintf("%s: cannot be checked statically, so %s", part.Dynamic, p.Dynamic)
	case part.Kind == Run:
		rules := p.matchingArgv(part)
		if k := gitKind(part.Argv); k != "" {
			// Running git push is pushing: the git rules apply too.
			rules = append(rules, p.matching(Class(k), "")...)
		}
		pd.Outcome, pd.Rule, pd.Reason = p.pick(rules, "")
	default:
		pd.Outcome, pd.Rule, pd.Reason = p.evalPath(part.Kind, part.Path)
	}
	if len(part.Via) > 0 {
		pd.Reason += " (via " + strings.Join(part.Via, ", ") + ")"
	}
	return pd
}

// evalPath decides a read or write. Writes to test files are judged by the
// tests rules, but a write deny that matches still wins; with no tests
// rule matching, the write rules decide.
func (p *Policy) evalPath(k Kind, target string) (Outcome, *Rule, string) {
	rel := p.relPath(target)
	if k == Read {
		return p.pick(p.matching(Class(Read), rel), "")
	}
	glob, ok := p.testGlob(rel)
	if !ok {
		return p.pick(p.matching(Class(Write), rel), "")
	}
	note := fmt.Sprintf("test file (glob %q)", glob)
	rules := p.matching(Test, rel)
	if len(rules) == 0 {
		return p.pick(p.matching(Class(Write), rel), note+", no tests rule matches")
	}
	for _, r := range p.matching(Class(Write), rel) {
		if r.Outcome == Deny {
			rules = append(rules, r)
		}
	}
	return p.pick(rules, note)
}

func (p *Policy) evalNet(target string) (Outcome, *Rule, string) {
	host := normalizeHost(target)
	var rules []*Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Class == Class(Net) && matchHost(r.Pattern, host) {
			rules = append(rules, r)
		}
	}
	return p.pick(rules, "")
}

// relPath makes target relative to the repository root when it is inside
// it, and absolute when it is not.
func (p *Policy) relPath(target string) string {
	if target == "" {
		return ""
	}
	abs := target
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(p.Root, abs)
	}
	abs = filepath.Clean(abs)
	if rel, err := filepath.Rel(p.Root, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(abs)
}

func (p *Policy) testGlob(rel string) (string, bool) {
	for _, g := range p.TestGlobs {
		if matchPath(g, rel) {
			return g, true
		}
	}
	return "", false
}

// matching returns the rules of class c whose pattern matches target.
func (p *Policy) matching(c Class, target string) []*Rule {
	var rs []*Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Class != c {
			continue
		}
		if r.Pattern == "" || matchPath(r.Pattern, target) {
			rs = append(rs, r)
		}
	}
	return rs
}

// matchingArgv returns the run rules whose argv prefix matches the part.
// For a part with unknown trailing words, ask and deny rules also match
// when those words could complete them: strictness is decided on what might
// run.
func (p *Policy) matchingArgv(part Part) []*Rule {
	var rs []*Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Class != Class(Run) {
			continue
		}
		switch matchArgv(r.words, part.Argv) {
		case argvMatch:
			rs = append(rs, r)
		case argvMaybe:
			if part.Open && r.Outcome != Allow {
				rs = append(rs, r)
			}
		}
	}
	return rs
}

// pick applies the precedence deny > ask > allow over the matching rules.
// Among rules with the winning outcome the most specific pattern is
// reported, the later one on ties (the repository's file comes after its
// preset).
func (p *Policy) pick(rules []*Rule, note string) (Outcome, *Rule, string) {
	prefix := ""
	if note != "" {
		prefix = note + "; "
	}
	if len(rules) == 0 {
		return p.Default, nil, fmt.Sprintf("%sno rule matches, so the default: %s", prefix, p.Default)
	}
	best := rules[0]
	for _, r := range rules[1:] {
		if r.Outcome > best.Outcome || r.Outcome == best.Outcome && specificity(r.Pattern) >= specificity(best.Pattern) {
			best = r
		}
	}
	reason := fmt.Sprintf("%smatched by %s", prefix, best)
	var beaten []string
	for _, r := range rules {
		if r.Outcome < best.Outcome {
			beaten = append(beaten, r.String())
		}
	}
	if len(beaten) > 0 {
		slices.Sort(beaten)
		reason += fmt.Sprintf(", which beats %s", strings.Join(slices.Compact(beaten), "; "))
	}
	return best.Outcome, best, reason
}

// specificity ranks patterns by how much literal text they contain.
func specificity(pattern string) int {
	n := 0
	for _, r := range pattern {
		if r != '*' && r != '?' {
			n++
		}
	}
	return n
}

// gitKind maps a git or gh command line to the action it performs.
func gitKind(argv []string) Kind {
	if len(argv) < 2 {
		return ""
	}
	switch filepath.Base(argv[0]) {
	case "git":
		// Skip global options: git -C dir -c k=v push.
		for i := 1; i < len(argv); i++ {
			a := argv[i]
			switch {
			case a == "-C" || a == "-c" || a == "--git-dir" || a == "--work-tree" || a == "--namespace":
				i++
			case strings.HasPrefix(a, "-"):
			case a == "commit":
				return Commit
			case a == "push":
				return Push
			default:
				return ""
			}
		}
	case "gh", "hub":
		if len(argv) >= 3 && argv[1] == "pr" && argv[2] == "create" || argv[1] == "pull-request" {
			return PR
		}
	}
	return ""
}

// ParseAction parses an action as written on the command line: run CMD,
// read PATH, write PATH, net HOST, git commit, git push, pr, memory.
func ParseAction(args []string) (Action, error) {
	if len(args) == 0 {
		return Action{}, fmt.Errorf("no action (want run, read, write, net, git commit, git push, pr or memory)")
	}
	verb, rest := args[0], args[1:]
	one := func(k Kind) (Action, error) {
		if len(rest) != 1 || rest[0] == "" {
			return Action{}, fmt.Errorf("%s takes one argument", verb)
		}
		return Action{Kind: k, Target: rest[0]}, nil
	}
	none := func(k Kind) (Action, error) {
		if len(rest) != 0 {
			return Action{}, fmt.Errorf("%s takes no argument", strings.Join(args[:len(args)-len(rest)], " "))
		}
		return Action{Kind: k}, nil
	}
	switch verb {
	case "run":
		if len(rest) == 0 {
			return Action{}, fmt.Errorf("run takes a command line")
		}
		return Action{Kind: Run, Target: strings.Join(rest, " ")}, nil
	case "read":
		return one(Read)
	case "write":
		return one(Write)
	case "net":
		return one(Net)
	case "git":
		if len(rest) > 0 {
			switch rest[0] {
			case "commit":
				rest = rest[1:]
				return none(Commit)
			case "push":
				rest = rest[1:]
				return none(Push)
			}
		}
		return Action{}, fmt.Errorf("git takes commit or push")
	case "git-commit", "commit":
		return none(Commit)
	case "git-push", "push":
		return none(Push)
	case "pr", "open-pr":
		return none(PR)
	case "open":
		if len(rest) > 0 && rest[0] == "pr" {
			rest = rest[1:]
			return none(PR)
		}
	case "memory":
		return none(Memory)
	case "change":
		if len(rest) > 0 && rest[0] == "memory" {
			rest = rest[1:]
			return none(Memory)
		}
	}
	return Action{}, fmt.Errorf("unknown action %q (want run, read, write, net, git commit, git push, pr or memory)", strings.Join(args, " "))
}

// IsTest reports whether path (relative to the root, or absolute) is a
// test file: one that the tests class, not the write class, governs.
func (p *Policy) IsTest(path string) bool {
	_, ok := p.testGlob(p.relPath(path))
	return ok
}
