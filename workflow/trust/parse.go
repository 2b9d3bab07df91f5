package trust

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// FileName is the policy file, relative to the repository root.
const FileName = ".smolvm/policy.toml"

//go:embed presets/*.toml
var presetFS embed.FS

// DefaultTestGlobs classify test files in common languages.
var DefaultTestGlobs = []string{
	"*_test.go",                                            // Go
	"test_*.py", "*_test.py", "conftest.py", "**/tests/**", // Python; Rust integration tests
	"*.test.*", "*.spec.*", "**/__tests__/**", // JavaScript, TypeScript
	"**/src/test/**", "*Test.java", "*Tests.java", "*Test.kt", // Java, Kotlin
	"*_spec.rb", "**/spec/**", // Ruby
	"*Test.php", "*Tests.cs", "*_test.exs", "*_test.c", "*_test.cc", "*_test.cpp",
	"**/testdata/**",
}

// Error is a problem in a policy file.
type Error struct {
	File string
	Line int // 0 when unknown
	Msg  string
}

func (e Error) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Errors lists every problem found in a policy file.
type Errors []Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Default is the policy of a repository without a policy file: every
// action asks.
func Default(root string) *Policy {
	return &Policy{
		Root:      root,
		Default:   Ask,
		Dynamic:   Ask,
		TestGlobs: DefaultTestGlobs,
		Timeout:   DefaultTimeout,
	}
}

// Load reads the policy of the repository at root, or returns Default if
// it has no policy file. A malformed file is an Errors.
func Load(root string) (*Policy, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(root, FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return Default(root), nil
	}
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	return Parse(root, FileName, data)
}

// Parse parses policy text; file names it in rules and errors.
func Parse(root, file string, data []byte) (*Policy, error) {
	f, errs := parseLayer(file, data)
	if len(errs) > 0 {
		return nil, errs
	}
	p := Default(root)
	p.File = file
	if f.preset != "" {
		text, err := PresetText(f.preset)
		if err != nil {
			return nil, Errors{{File: file, Line: f.presetLine, Msg: err.Error()}}
		}
		pre, errs := parseLayer("preset:"+f.preset, []byte(text))
		if len(errs) > 0 {
			return nil, errs
		}
		if pre.preset != "" {
			return nil, Errors{{File: pre.file, Line: pre.presetLine, Msg: "a preset cannot use another preset"}}
		}
		p.Preset = f.preset
		pre.applyTo(p)
	}
	f.applyTo(p)
	return p, nil
}

// PresetNames lists the shipped presets.
func PresetNames() []string {
	ents, _ := presetFS.ReadDir("presets")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	return names
}

// PresetText returns a preset's TOML.
func PresetText(name string) (string, error) {
	b, err := presetFS.ReadFile("presets/" + name + ".toml")
	if err != nil || strings.ContainsAny(name, "/\\") {
		return "", fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	return string(b), nil
}

// rawFile is the TOML schema of a policy file.
type rawFile struct {
	Preset    string
	Default   string
	Dynamic   string
	Approvals struct{ Timeout string }
	Read      ruleLists
	Write     ruleLists
	Tests     struct {
		Globs []string
		ruleLists
	}
	Run    ruleLists
	Net    ruleLists
	Git    struct{ Commit, Push, PR string }
	Memory struct{ Change string }
}

type ruleLists struct{ Allow, Ask, Deny []string }

// layer is one policy file, validated. Settings the file leaves out stay
// at their zero value so that they do not override a preset's.
type layer struct {
	file       string
	preset     string
	presetLine int
	def, dyn   Outcome
	timeout    time.Duration
	testGlobs  []string // nil: not set
	rules      []Rule
}

func parseLayer(file string, data []byte) (*layer, Errors) {
	var raw rawFile
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		line := 0
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line, err = pe.Position.Line, errors.New(pe.Message)
		}
		return nil, Errors{{File: file, Line: line, Msg: err.Error()}}
	}
	loc := locate(string(data))
	l := &layer{file: file, preset: raw.Preset, presetLine: loc.key("preset")}
	var errs Errors
	bad := func(line int, format string, args ...any) {
		errs = append(errs, Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if raw.Preset != "" {
		if _, err := PresetText(raw.Preset); err != nil {
			bad(l.presetLine, "%v", err)
		}
	}
	for _, k := range md.Undecoded() {
		bad(loc.key(k.String()), "unknown key %q", k.String())
	}
	outcome := func(key, s string) Outcome {
		if s == "" {
			return 0
		}
		o, err := ParseOutcome(s)
		if err != nil {
			bad(loc.key(key), "%s: %v", key, err)
		}
		return o
	}
	l.def = outcome("default", raw.Default)
	l.dyn = outcome("dynamic", raw.Dynamic)
	if l.dyn == Allow {
		bad(loc.key("dynamic"), "dynamic: commands that cannot be checked are never allowed (want ask or deny)")
	}
	if raw.Approvals.Timeout != "" {
		d, err := time.ParseDuration(raw.Approvals.Timeout)
		if err != nil || d <= 0 {
			bad(loc.key("approvals.timeout"), "approvals.timeout: want a positive duration such as 5m, got %q", raw.Approvals.Timeout)
		}
		l.timeout = d
	}
	if md.IsDefined("tests", "globs") {
		l.testGlobs = []string{}
		for _, g := range raw.Tests.Globs {
			if err := checkGlob(g); err != nil {
				bad(loc.elem("tests.globs", g), "tests.globs: %v", err)
			}
			l.testGlobs = append(l.testGlobs, g)
		}
	}
	lists := []struct {
		class Class
		lists ruleLists
		check func(string) error
	}{
		{Class(Read), raw.Read, checkGlob},
		{Class(Write), raw.Write, checkGlob},
		{Test, raw.Tests.ruleLists, checkGlob},
		{Class(Run), raw.Run, func(s string) error { _, err := patternWords(s); return err }},
		{Class(Net), raw.Net, checkHost},
	}
	for _, c := range lists {
		seen := map[string]Outcome{}
		for _, o := range []Outcome{Allow, Ask, Deny} {
			key := string(c.class) + "." + o.String()
			for _, pat := range c.lists.of(o) {
				line := loc.elem(key, pat)
				if err := c.check(pat); err != nil {
					bad(line, "%s: %v", key, err)
					continue
				}
				if prev, dup := seen[pat]; dup {
					bad(line, "%s: %q is also listed under %s.%s", key, pat, c.class, prev)
					continue
				}
				seen[pat] = o
				r := Rule{Class: c.class, Pattern: pat, Outcome: o, File: file, Line: line}
				if c.class == Class(Run) {
					r.words, _ = patternWords(pat)
				}
				l.rules = append(l.rules, r)
			}
		}
	}
	single := []struct {
		kind Kind
		key  string
		val  string
	}{
		{Commit, "git.commit", raw.Git.Commit},
		{Push, "git.push", raw.Git.Push},
		{PR, "git.pr", raw.Git.PR},
		{Memory, "memory.change", raw.Memory.Change},
	}
	for _, s := range single {
		if o := outcome(s.key, s.val); o != 0 {
			l.rules = append(l.rules, Rule{Class: Class(s.kind), Outcome: o, File: file, Line: loc.key(s.key)})
		}
	}
	// Rules are kept in file order so that explanations read naturally.
	slices.SortStableFunc(l.rules, func(a, b Rule) int { return a.Line - b.Line })
	return l, errs
}

func (r ruleLists) of(o Outcome) []string {
	switch o {
	case Allow:
		return r.Allow
	case Ask:
		return r.Ask
	}
	return r.Deny
}

// applyTo lays l over p: settings l makes replace p's, and a rule of l
// replaces p's rule for the same class and pattern (that is how a file
// overrides its preset). All other rules add up, and deny beats ask beats
// allow among them.
func (l *layer) applyTo(p *Policy) {
	if l.def != 0 {
		p.Default = l.def
		p.Dynamic = max(l.def, Ask)
	}
	if l.dyn != 0 {
		p.Dynamic = l.dyn
	}
	if l.timeout != 0 {
		p.Timeout = l.timeout
	}
	if l.testGlobs != nil {
		p.TestGlobs = l.testGlobs
	}
	for _, r := range l.rules {
		p.Rules = slices.DeleteFunc(p.Rules, func(old Rule) bool {
			return old.Class == r.Class && old.Pattern == r.Pattern
		})
	}
	p.Rules = append(p.Rules, l.rules...)
}

// locator finds the lines of keys and array elements in TOML text, which
// the decoder does not report. It understands the subset of TOML a policy
// file uses: tables, dotted keys and (multi-line) arrays of strings.
type locator struct {
	keys  map[string]int
	elems map[string]int
}

func (l locator) key(k string) int { return l.keys[k] }

func (l locator) elem(k, val string) int {
	if n, ok := l.elems[k+"\x00"+val]; ok {
		return n
	}
	return l.keys[k]
}

func locate(src string) locator {
	l := locator{keys: map[string]int{}, elems: map[string]int{}}
	lines := strings.Split(src, "\n")
	table := ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			table = normKey(strings.Trim(line[:end], "[] "))
			l.keys[table] = i + 1
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq <= 0 || strings.HasPrefix(line, "#") {
			continue
		}
		key := normKey(line[:eq])
		if table != "" {
			key = table + "." + key
		}
		l.keys[key] = i + 1
		// Record the line of each string in the value; arrays may span lines.
		depth, rest := 0, line[eq+1:]
		for {
			depth += scanStrings(rest, func(s string) {
				if _, ok := l.elems[key+"\x00"+s]; !ok {
					l.elems[key+"\x00"+s] = i + 1
				}
			})
			if depth <= 0 || i+1 == len(lines) {
				break
			}
			i++
			rest = lines[i]
		}
	}
	return l
}

func normKey(k string) string {
	parts := strings.Split(strings.TrimSpace(k), ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

// scanStrings calls fn for each string literal in one line of TOML and
// returns the change in bracket depth, ignoring comments.
func scanStrings(line string, fn func(string)) int {
	depth := 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case '#':
			return depth
		case '[':
			depth++
		case ']':
			depth--
		case '"', '\'':
			j := i + 1
			for j < len(line) && line[j] != c {
				if c == '"' && line[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(line) {
				return depth
			}
			s := line[i+1 : j]
			if c == '"' {
				if u, err := strconv.Unquote(line[i : j+1]); err == nil {
					s = u
				}
			}
			fn(s)
			i = j
		}
	}
	return depth
}
