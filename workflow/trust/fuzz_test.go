package trust

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

func FuzzParsePolicy(f *testing.F) {
	for _, name := range []string{"tricky.toml", "bad.toml", "syntax.toml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	for _, name := range PresetNames() {
		text, _ := PresetText(name)
		f.Add(text)
		f.Add("preset = \"" + name + "\"\n[run]\nallow = [\"x\"]\n")
	}
	f.Add("[tests]\nglobs = ['**/[a-z]*_test.go']\n")
	f.Add("read.allow = [\"a\",\n\"b\"] # c\n")
	actions := []Action{
		{Kind: Run, Target: "true && rm -rf / > out"}, {Kind: Write, Target: "a/b_test.go"},
		{Kind: Read, Target: "/etc/passwd"}, {Kind: Net, Target: "a.example.com:443"}, {Kind: Push},
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse("/repo", "f.toml", []byte(text))
		if err != nil {
			errs, ok := err.(Errors)
			if !ok || len(errs) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty Errors", err, err)
			}
			for _, e := range errs {
				if e.File != "f.toml" && e.File[:7] != "preset:" {
					t.Fatalf("error %v names file %q", e, e.File)
				}
			}
			return
		}
		if p.Dynamic < Ask || p.Default == 0 || p.Timeout <= 0 {
			t.Fatalf("invalid policy %+v", p)
		}
		for _, a := range actions {
			d := p.Evaluate(a)
			if d.Outcome < Allow || d.Outcome > Deny {
				t.Fatalf("%s: outcome %d", a, d.Outcome)
			}
		}
	})
}

func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{
		"true && rm -rf /", "echo $(rm -rf /) `id`", "a; b | c || d &", "FOO=1 BAR=2 rm -rf /",
		"sh -c 'ls && bash -c \"rm x\"'", "sudo -u root env -i xargs -n1 rm", "cat < in > out 2>&1 >&2",
		"$CMD args", "eval x", "find . -exec rm {} +", "if a; then b; fi", "f() { g; }", "x=$(y) z",
		"cat <(a) > >(b)", "'unterminated", "env -S 'rm -rf' /", "timeout -s KILL 5 nice -n1 nohup cmd",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		for _, part := range Split(line) {
			switch {
			case part.Dynamic != "":
			case part.Kind == Run:
				if len(part.Argv) == 0 {
					t.Fatalf("%q: run part without argv: %+v", line, part)
				}
			case part.Kind == Write || part.Kind == Read:
				if part.Path == "" && part.Dynamic == "" {
					t.Fatalf("%q: %s part without a path", line, part.Kind)
				}
			default:
				t.Fatalf("%q: part of kind %q", line, part.Kind)
			}
			if part.Kind != Run || part.Dynamic != "" || part.Open || slices.Contains(part.Argv, "") {
				continue
			}
			// A resolved command, quoted back into shell, resolves to itself
			// (unless quoting needs $'…', which Split leaves unresolved).
			quotable := true
			for _, a := range part.Argv {
				if q, err := syntax.Quote(a, syntax.LangBash); err != nil || strings.HasPrefix(q, "$'") {
					quotable = false
				}
			}
			if !quotable {
				continue
			}
			again := Split(part.String())
			if len(again) == 0 || !slices.Equal(again[0].Argv, part.Argv) {
				t.Fatalf("%q: part %q re-splits to %+v", line, part.Argv, again)
			}
		}
	})
}
