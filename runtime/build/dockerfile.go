package build

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// plan is a parsed Dockerfile and the stage to build.
type plan struct {
	name   string
	stages []instructions.Stage
	meta   map[string]string // ARGs before the first FROM, resolved
	target int
	lex    *shell.Lex
}

// parse reads o.Dockerfile with buildkit's parser and checks that every
// instruction and flag is one this builder carries out.
func parse(o Options) (*plan, error) {
	res, err := parser.Parse(bytes.NewReader(o.Dockerfile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDockerfile, o.Name, err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDockerfile, o.Name, err)
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%w: %s: no FROM", ErrDockerfile, o.Name)
	}
	p := &plan{name: o.Name, stages: stages, meta: map[string]string{}, target: len(stages) - 1, lex: shell.NewLex(res.EscapeToken)}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			p.meta[kv.Key] = argValue(kv, o.Args, "")
		}
	}
	if o.Target != "" {
		if p.target = p.stageIndex(o.Target, len(stages)); p.target < 0 {
			return nil, fmt.Errorf("%w: %s: --target %s: no such stage", ErrDockerfile, o.Name, o.Target)
		}
	}
	for _, s := range stages {
		if s.Platform != "" {
			return nil, p.errAt(s.Location, "FROM --platform is not supported")
		}
		for _, c := range s.Commands {
			if err := p.check(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// argValue is an ARG's value: --build-arg's, else the default, else def.
func argValue(kv instructions.KeyValuePairOptional, args map[string]string, def string) string {
	if v, ok := args[kv.Key]; ok {
		return v
	}
	if kv.Value != nil {
		return *kv.Value
	}
	return def
}

// stageIndex finds a stage among the first n by name or number, or -1.
func (p *plan) stageIndex(name string, n int) int {
	for i := range n {
		if strings.EqualFold(p.stages[i].Name, name) || fmt.Sprint(i) == name {
			return i
		}
	}
	return -1
}

// check refuses what the builder would otherwise silently get wrong.
func (p *plan) check(c instructions.Command) error {
	bad := func(what string) error { return p.errAt(c.Location(), what) }
	switch c := c.(type) {
	case *instructions.RunCommand:
		if len(c.FlagsUsed) > 0 {
			return bad("RUN --" + c.FlagsUsed[0] + " is not supported")
		}
		if len(c.Files) > 0 {
			return bad("RUN with a here-document is not supported")
		}
	case *instructions.CopyCommand:
		switch {
		case c.Chmod != "":
			return bad("COPY --chmod is not supported")
		case len(c.ExcludePatterns) > 0:
			return bad("COPY --exclude is not supported")
		case c.Parents:
			return bad("COPY --parents is not supported")
		case len(c.SourceContents) > 0:
			return bad("COPY with a here-document is not supported")
		}
	case *instructions.AddCommand:
		switch {
		case c.Chmod != "" || c.Checksum != "" || c.KeepGitDir != nil || c.Unpack != nil || len(c.ExcludePatterns) > 0:
			return bad("ADD supports --chown only")
		case len(c.SourceContents) > 0:
			return bad("ADD with a here-document is not supported")
		}
	case *instructions.EnvCommand, *instructions.ArgCommand, *instructions.WorkdirCommand,
		*instructions.UserCommand, *instructions.EntrypointCommand, *instructions.CmdCommand,
		*instructions.ExposeCommand, *instructions.LabelCommand, *instructions.ShellCommand,
		*instructions.MaintainerCommand:
	default:
		return bad(strings.ToUpper(c.Name()) + " is not supported")
	}
	return nil
}

// errAt is an ErrDockerfile naming the Dockerfile's line.
func (p *plan) errAt(loc []parser.Range, msg string) error {
	return fmt.Errorf("%w: %s:%d: %s", ErrDockerfile, p.name, line(loc), msg)
}

func line(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

// vars is an environment for expanding words: the stage's ARGs, then its
// ENV over them, as docker does.
type vars map[string]string

func (v vars) Get(k string) (string, bool) { s, ok := v[k]; return s, ok }
func (v vars) Keys() []string {
	out := make([]string, 0, len(v))
	for k := range v {
		out = append(out, k)
	}
	return out
}

// expander returns the word expander of a stage state.
func (p *plan) expander(st *state) instructions.SingleWordExpander {
	v := vars{}
	for k, s := range st.args {
		v[k] = s
	}
	for _, e := range st.cf.Config.Env {
		k, s, _ := strings.Cut(e, "=")
		v[k] = s
	}
	return func(word string) (string, error) {
		out, _, err := p.lex.ProcessWord(word, v)
		return out, err
	}
}
