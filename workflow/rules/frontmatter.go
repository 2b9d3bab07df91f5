package rules

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"smolvm.dev/smolvm/internal/lazyre"
)

// frontmatter is the YAML block between "---" lines at the top of a rule file.
type frontmatter struct {
	fields   []field
	bodyLine int // line where the body starts
}

// field is one top-level key of a frontmatter block. Only scalars and lists
// of scalars are kept: no rule format uses anything deeper.
type field struct {
	key    string
	line   int
	value  string   // scalar value
	list   []string // sequence items
	isList bool
	quoted bool // the scalar was written as a quoted string
	null   bool // the key has no value
	nested bool // the value is a mapping or a list of non-scalars
}

func (fm *frontmatter) get(key string) (field, bool) {
	for _, f := range fm.fields {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// issue is a problem found while parsing a file, without the file name.
type issue struct {
	sev  Severity
	code string
	line int
	msg  string
}

// parseFrontmatter splits src (LF line endings) into frontmatter and body.
// Text that is not valid YAML but reads as plain "key: value" lines, as
// Cursor writes unquoted globs such as `globs: *.ts`, is accepted with a
// warning; anything else malformed is an error and yields no fields.
func parseFrontmatter(src string) (fm frontmatter, body string, issues []issue) {
	src = strings.TrimPrefix(src, "\ufeff")
	fm.bodyLine = 1
	first, rest, ok := strings.Cut(src, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		return fm, src, nil
	}
	if !ok {
		rest = ""
	}
	var block []string
	closed := false
	for line := range strings.Lines(rest) {
		if l := strings.TrimRight(line, " \t\n"); l == "---" || l == "..." {
			closed = true
			break
		}
		block = append(block, strings.TrimSuffix(line, "\n"))
	}
	if !closed {
		return fm, src, []issue{{Error, "frontmatter-malformed", 1, "frontmatter opened with --- is never closed"}}
	}
	fm.bodyLine = len(block) + 3
	lines := strings.Split(src, "\n")
	if len(lines) >= fm.bodyLine {
		body = strings.Join(lines[fm.bodyLine-1:], "\n")
	}
	text := strings.Join(block, "\n")
	fields, err := yamlFields(text)
	if err == nil {
		fm.fields = fields
		return fm, body, nil
	}
	if fields, ok := plainFields(block); ok {
		fm.fields = fields
		msg, line := fileLines(err.Error())
		return fm, body, []issue{{Warning, "frontmatter-not-yaml", line,
			fmt.Sprintf("frontmatter is not valid YAML (%s); read as plain key: value lines, but YAML tools will reject it (quote the value)", msg)}}
	}
	msg, line := fileLines(err.Error())
	return fm, body, []issue{{Error, "frontmatter-malformed", line, "frontmatter: " + msg}}
}

var yamlLine = lazyre.New(`\bline (\d+)`)

// fileLines renumbers the "line N" of a YAML error, counted in the block,
// as lines of the file, and returns the first one (2 if there is none).
func fileLines(msg string) (string, int) {
	first := 0
	msg = yamlLine().ReplaceAllStringFunc(msg, func(s string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
		if err != nil {
			return s
		}
		if first == 0 {
			first = n + 1
		}
		return fmt.Sprintf("line %d", n+1)
	})
	return msg, max(first, 2)
}

// yamlFields decodes a frontmatter block with a YAML parser. Lines are
// counted in the file, whose line 1 is the opening "---".
func yamlFields(text string) (fields []field, err error) {
	// A parser bug must not take down a lint run over user files.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml parser failed: %v", r)
		}
	}()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil // empty block
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: frontmatter must be a mapping of keys to values", m.Line+1)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := field{key: k.Value, line: k.Line + 1}
		switch v.Kind {
		case yaml.ScalarNode:
			f.value = v.Value
			f.null = v.Tag == "!!null"
			f.quoted = v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0
		case yaml.SequenceNode:
			f.isList = true
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					f.nested = true
					continue
				}
				f.list = append(f.list, item.Value)
			}
		default:
			f.nested = true
		}
		fields = append(fields, f)
	}
	return fields, nil
}

var plainKey = lazyre.New(`^([A-Za-z_][A-Za-z0-9_-]*):(?:\s+(.*))?$`)

// plainFields reads a block as flat "key: value" lines with optional
// "- item" lists, the way Cursor itself reads its frontmatter.
func plainFields(block []string) ([]field, bool) {
	var fields []field
	for i, line := range block {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if item, ok := strings.CutPrefix(trimmed, "- "); ok && len(fields) > 0 {
			last := &fields[len(fields)-1]
			if last.value != "" || last.quoted {
				return nil, false
			}
			last.isList, last.null = true, false
			last.list = append(last.list, unquote(strings.TrimSpace(item)))
			continue
		}
		m := plainKey().FindStringSubmatch(strings.TrimRight(line, " \t"))
		if m == nil {
			return nil, false
		}
		v := strings.TrimSpace(m[2])
		f := field{key: m[1], line: i + 2, value: unquote(v), null: v == ""}
		f.quoted = len(v) >= 2 && f.value != v
		fields = append(fields, f)
	}
	return fields, true
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// globs reads a field holding one glob, a comma-separated list of globs
// (Cursor's own format) or a YAML list.
func (f field) globs() []string {
	items := f.list
	if !f.isList {
		items = splitGlobs(f.value)
	}
	var out []string
	for _, g := range items {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// splitGlobs splits at commas outside braces, so "*.{ts,tsx},docs/**" is
// two globs.
func splitGlobs(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{':
			depth++
		case '}':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
