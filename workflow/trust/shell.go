package trust

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// maxDepth bounds how deeply sh -c strings are parsed inside each other.
const maxDepth = 8

// Part is one thing a command line does on its own: run a program, or
// write or read a file through a redirection. Every part of a compound
// command is judged separately.
type Part struct {
	Kind Kind     `json:"kind"`           // Run, Write or Read
	Argv []string `json:"argv,omitempty"` // Run: the static words, up to the first dynamic one
	// Open reports that more words follow Argv whose values are only known
	// at run time (a $VAR, a glob in xargs input, ...).
	Open bool   `json:"open,omitempty"`
	Path string `json:"path,omitempty"` // Write, Read: the redirection target
	// Dynamic says why the part cannot be resolved statically; such a part
	// gets the policy's strictest outcome for unknown commands.
	Dynamic string `json:"dynamic,omitempty"`
	// Via lists the wrappers peeled off to reach Argv (sudo, sh -c, ...).
	Via []string `json:"via,omitempty"`
}

// String renders the part as shell text.
func (p Part) String() string {
	switch {
	case p.Kind == Run && len(p.Argv) > 0:
		s := quoteArgv(p.Argv)
		if p.Open {
			s += " …"
		}
		return s
	case p.Kind == Write:
		return "> " + orUnknown(p.Path)
	case p.Kind == Read:
		return "< " + orUnknown(p.Path)
	}
	return "(unknown command)"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown file)"
	}
	return s
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		s, err := syntax.Quote(a, syntax.LangBash)
		if err != nil {
			s = fmt.Sprintf("%q", a)
		}
		q[i] = s
	}
	return strings.Join(q, " ")
}

// Split parses a shell command line into the parts it runs and the files
// its redirections touch, looking through &&, ||, ;, pipes, subshells,
// $(…), backticks, env prefixes and wrappers such as sudo or sh -c. A line
// that does not parse is one dynamic part.
func Split(line string) []Part {
	return splitDepth(line, 0)
}

// SplitArgv is Split for a command that is exec'd directly, without a shell.
func SplitArgv(argv []string) []Part {
	if len(argv) == 0 {
		return []Part{{Kind: Run, Dynamic: "empty command"}}
	}
	return unwrap(argv, false, nil, 0)
}

func splitDepth(line string, depth int) []Part {
	if depth > maxDepth {
		return []Part{{Kind: Run, Dynamic: "shell nested too deeply"}}
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		return []Part{{Kind: Run, Dynamic: "cannot parse: " + err.Error()}}
	}
	var parts []Part
	syntax.Walk(f, func(n syntax.Node) bool {
		// Every simple command is the Cmd of a statement: the command
		// first, then the files its redirections touch.
		if st, ok := n.(*syntax.Stmt); ok {
			if c, ok := st.Cmd.(*syntax.CallExpr); ok {
				parts = append(parts, callParts(c, depth)...)
			}
			parts = append(parts, redirParts(st.Redirs)...)
		}
		return true
	})
	return parts
}

// callParts resolves one simple command. Assignments before it (FOO=1 cmd)
// do not change what runs; substitutions inside its words are separate
// commands that the walk reaches on its own.
func callParts(c *syntax.CallExpr, depth int) []Part {
	if len(c.Args) == 0 {
		return nil // plain assignment
	}
	var argv []string
	open := false
	for _, w := range c.Args {
		s, ok := literal(w)
		if !ok {
			open = true
			break
		}
		argv = append(argv, s)
	}
	if len(argv) == 0 {
		return []Part{{Kind: Run, Dynamic: "command name is only known at run time"}}
	}
	return unwrap(argv, open, nil, depth)
}

func redirParts(rs []*syntax.Redirect) []Part {
	var parts []Part
	for _, r := range rs {
		var kind Kind
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob,
			syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob, syntax.RdrInOut:
			kind = Write
		case syntax.DplOut:
			// >&2 duplicates a descriptor; >&file is bash for &>file.
			if s, ok := literal(r.Word); ok && (s == "-" || isDigits(s)) {
				continue
			}
			kind = Write
		case syntax.RdrIn:
			kind = Read
		default:
			continue // heredocs and <&N read nothing from disk
		}
		if len(r.Word.Parts) == 1 {
			if _, ok := r.Word.Parts[0].(*syntax.ProcSubst); ok {
				continue // > >(cmd) writes to a pipe; cmd is checked itself
			}
		}
		p, ok := literal(r.Word)
		if !ok {
			parts = append(parts, Part{Kind: kind, Dynamic: "redirection target is only known at run time"})
			continue
		}
		if p == "" || isStream(p) {
			continue // fails at run time, or touches no file
		}
		parts = append(parts, Part{Kind: kind, Path: p})
	}
	return parts
}

// isStream reports device files that redirections use without touching
// anything on disk.
func isStream(p string) bool {
	switch p {
	case "/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty":
		return true
	}
	return strings.HasPrefix(p, "/dev/fd/") && isDigits(strings.TrimPrefix(p, "/dev/fd/"))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// literal returns the value of a word whose value does not depend on the
// environment: plain, escaped and quoted text only.
func literal(w *syntax.Word) (string, bool) {
	if w == nil {
		return "", false
	}
	var b strings.Builder
	for _, wp := range w.Parts {
		switch wp := wp.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(wp.Value, false))
		case *syntax.SglQuoted:
			if wp.Dollar {
				return "", false // $'…' escapes: not worth resolving
			}
			b.WriteString(wp.Value)
		case *syntax.DblQuoted:
			for _, p := range wp.Parts {
				lit, ok := p.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescape(lit.Value, true))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescape removes shell backslash quoting: outside quotes a backslash
// quotes any character; inside double quotes only $ ` " \ and newline.
func unescape(s string, dquoted bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		if dquoted && !strings.ContainsRune("$`\"\\\n", rune(next)) {
			b.WriteByte(c)
			continue
		}
		i++
		if next != '\n' { // backslash-newline is a line continuation
			b.WriteByte(next)
		}
	}
	return b.String()
}

// unwrap peels wrappers that run another command (sudo, env, xargs, sh -c,
// ...) and returns the parts of what finally runs.
func unwrap(argv []string, open bool, via []string, depth int) []Part {
	for {
		name := path.Base(argv[0])
		var rest []string // the wrapped command; nil if argv is no wrapper
		switch name {
		case "sudo", "doas":
			rest = skipOpts(argv[1:], "ugCDhprtUTR")
		case "env":
			rest = envArgs(argv[1:])
		case "nice":
			rest = skipOpts(argv[1:], "n")
		case "nohup", "builtin":
			rest = skipOpts(argv[1:], "")
		case "time":
			rest = skipOpts(argv[1:], "fo")
		case "stdbuf":
			rest = skipOpts(argv[1:], "ioe")
		case "exec":
			rest = skipOpts(argv[1:], "a")
		case "command":
			if len(argv) > 1 && (argv[1] == "-v" || argv[1] == "-V") {
				break // a lookup, runs nothing
			}
			rest = skipOpts(argv[1:], "")
		case "timeout":
			rest = skipOpts(argv[1:], "sk")
			if len(rest) > 0 {
				rest = rest[1:] // the duration
			}
		case "xargs":
			rest = skipOpts(argv[1:], "adEeIiLlnPs")
			if len(rest) == 0 {
				rest = []string{"echo"}
			}
			open = true // input lines become more arguments
		case "eval":
			return []Part{{Kind: Run, Dynamic: "eval runs a string built at run time", Via: via}}
		case "find":
			return append([]Part{{Kind: Run, Argv: argv, Open: open, Via: via}}, findExec(argv, open, via, depth)...)
		case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash":
			if script, found, ok := shellScript(argv[1:]); found {
				return shellParts(name, script, ok, open, via, depth)
			}
		}
		if rest == nil {
			return []Part{{Kind: Run, Argv: argv, Open: open, Via: via}}
		}
		if len(rest) == 0 {
			if open {
				return []Part{{Kind: Run, Dynamic: name + " runs a command only known at run time", Via: via}}
			}
			// sudo -v, env alone, ...: the wrapper itself is the command.
			return []Part{{Kind: Run, Argv: argv, Via: via}}
		}
		via = append(via[:len(via):len(via)], name)
		argv = rest
	}
}

// shellParts parses the script of sh -c SCRIPT as a command line of its own.
func shellParts(name, script string, ok, open bool, via []string, depth int) []Part {
	v := append(via[:len(via):len(via)], name+" -c")
	if !ok {
		why := name + " -c without a script"
		if open {
			why = name + " -c script is only known at run time"
		}
		return []Part{{Kind: Run, Dynamic: why, Via: v}}
	}
	sub := splitDepth(script, depth+1)
	for i := range sub {
		sub[i].Via = append(v[:len(v):len(v)], sub[i].Via...)
	}
	return sub
}

// skipOpts drops leading options and returns what follows (never nil);
// letters in withArg take a value, either attached (-uroot) or as the next
// word.
func skipOpts(args []string, withArg string) []string {
	i := 0
	for i < len(args) {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		i++
		if strings.HasPrefix(a, "--") {
			if !strings.Contains(a, "=") && longTakesArg(a) {
				i++
			}
			continue
		}
		// In a cluster like -nu root, the first letter taking a value ends it.
		for j := 1; j < len(a); j++ {
			if strings.IndexByte(withArg, a[j]) >= 0 {
				if j == len(a)-1 {
					i++
				}
				break
			}
		}
	}
	i = min(i, len(args))
	return append([]string{}, args[i:]...)
}

// longTakesArg lists the long options of the wrappers above that take a
// separate value.
func longTakesArg(opt string) bool {
	switch opt {
	case "--user", "--group", "--chdir", "--unset", "--signal", "--kill-after",
		"--adjustment", "--input", "--output", "--error", "--arg-file", "--delimiter",
		"--max-args", "--max-procs", "--max-lines", "--max-chars", "--replace",
		"--eof", "--prompt", "--close-from", "--role", "--type", "--host", "--other-user",
		"--split-string":
		return true
	}
	return false
}

// envArgs returns the command env runs: it skips options and NAME=VALUE
// words and expands -S strings into words.
func envArgs(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-S" || a == "--split-string":
			if i+1 < len(args) {
				return append(strings.Fields(args[i+1]), args[i+2:]...)
			}
			return []string{}
		case strings.HasPrefix(a, "--split-string="):
			return append(strings.Fields(strings.TrimPrefix(a, "--split-string=")), args[i+1:]...)
		case strings.HasPrefix(a, "-S"):
			return append(strings.Fields(a[2:]), args[i+1:]...)
		case a == "-u" || a == "-C" || a == "--unset" || a == "--chdir":
			i++
		case a == "--":
			return args[i+1:]
		case strings.HasPrefix(a, "-") || strings.Contains(a, "="):
		default:
			return args[i:]
		}
	}
	return []string{}
}

// shellScript finds the script of sh -c SCRIPT. found reports a -c option;
// ok reports that the script word is present.
func shellScript(args []string) (script string, found, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			if found {
				return a, true, true
			}
			return "", false, false
		}
		if a == "-o" || a == "+o" || a == "-O" || a == "+O" {
			i++
			continue
		}
		if a[0] == '-' && !strings.HasPrefix(a, "--") && strings.Contains(a, "c") {
			found = true
		}
	}
	return "", found, false
}

// findExec returns the commands find runs through -exec and friends.
func findExec(argv []string, open bool, via []string, depth int) []Part {
	var parts []Part
	v := append(via[:len(via):len(via)], "find")
	for i := 1; i < len(argv); i++ {
		switch argv[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(argv) && argv[j] != ";" && argv[j] != "+" {
			j++
		}
		if j == i+1 {
			continue
		}
		cmdOpen := open && j == len(argv)
		parts = append(parts, unwrap(argv[i+1:j:j], cmdOpen, v, depth)...)
		i = j
	}
	return parts
}
