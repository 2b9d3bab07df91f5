package build

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
)

// run is one build in progress.
type run struct {
	b      *Builder
	o      Options
	plan   *plan
	ignore *patternmatcher.PatternMatcher
	p      *progress
	done   map[int]*state // built stages
}

// state is a stage so far.
type state struct {
	// base holds the layers so far; nil for scratch before any layer.
	base  *sandbox.Image
	cf    v1.ConfigFile
	key   string            // the cache key of the last step
	args  map[string]string // ARGs in scope
	shell []string
	// label is "[name " or "[" before each step's number.
	label  string
	index  int // the stage's
	at, of int
	cmdSet bool // CMD given in this stage
}

var defaultShell = []string{"/bin/sh", "-c"}

// defaultPath is a scratch image's PATH, as docker sets it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stage builds stage i, and first the stages it needs.
func (r *run) stage(ctx context.Context, i int) (*state, error) {
	if st, ok := r.done[i]; ok {
		return st, nil
	}
	s := r.plan.stages[i]
	st, err := r.from(ctx, i)
	if err != nil {
		return nil, err
	}
	for _, c := range s.Commands {
		if err := r.step(ctx, st, c); err != nil {
			return nil, err
		}
	}
	r.done[i] = st
	return st, nil
}

// from starts stage i from its base: scratch, an earlier stage, or an
// image in the store or pulled.
func (r *run) from(ctx context.Context, i int) (*state, error) {
	s := r.plan.stages[i]
	st := &state{args: map[string]string{}, shell: defaultShell, label: "[", index: i}
	if len(r.plan.stages) > 1 {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("stage-%d", i)
		}
		st.label = "[" + name + " "
	}
	for _, c := range s.Commands {
		if layerStep(c) {
			st.of++
		}
	}
	st.of++
	base, _, err := r.plan.lex.ProcessWord(s.BaseName, vars(r.plan.meta))
	if err != nil {
		return nil, r.plan.errAt(s.Location, err.Error())
	}
	start := time.Now()
	n := r.p.begin(r.title(st, "FROM "+base))
	if err := r.base(ctx, st, i, base); err != nil {
		r.p.failed(n, err)
		return nil, err
	}
	r.p.done(n, start)
	return st, nil
}

// base sets st to start from the image or stage named base.
func (r *run) base(ctx context.Context, st *state, i int, base string) error {
	if base == "scratch" {
		st.key = chain("", "scratch")
		st.cf = v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, Config: v1.Config{Env: []string{"PATH=" + defaultPath}}}
		return nil
	}
	if j := r.plan.stageIndex(base, i); j >= 0 {
		prev, err := r.stage(ctx, j)
		if err != nil {
			return err
		}
		st.base, st.key, st.shell = prev.base, prev.key, prev.shell
		st.cf = *cloneConfig(&prev.cf)
		return nil
	}
	img, err := r.image(ctx, base)
	if err != nil {
		return r.plan.errAt(r.plan.stages[i].Location, err.Error())
	}
	cf, err := r.b.images.ConfigFile(ctx, img)
	if err != nil {
		return err
	}
	st.base, st.key, st.cf = img, chain("", "image", img.ID), *cloneConfig(cf)
	if len(st.cf.Config.Shell) > 0 {
		st.shell = st.cf.Config.Shell
	}
	return nil
}

// image finds ref in the store, or pulls it.
func (r *run) image(ctx context.Context, ref string) (*sandbox.Image, error) {
	img, err := r.b.images.Get(ctx, ref)
	if err == nil {
		if img.Builtin {
			return nil, fmt.Errorf("FROM %s: the builtin image mounts the host's files and cannot be built on", ref)
		}
		return img, nil
	}
	if !errors.Is(err, image.ErrNotFound) || image.IsID(ref) {
		return nil, err
	}
	return r.b.images.Pull(ctx, ref, image.PullOptions{Insecure: r.o.Insecure})
}

// layerStep reports whether c changes files, and so is numbered.
func layerStep(c instructions.Command) bool {
	switch c.(type) {
	case *instructions.RunCommand, *instructions.CopyCommand, *instructions.AddCommand, *instructions.WorkdirCommand:
		return true
	}
	return false
}

func (r *run) title(st *state, text string) string {
	st.at++
	return fmt.Sprintf("%s%d/%d] %s", st.label, st.at, st.of, text)
}

// step carries out one instruction.
func (r *run) step(ctx context.Context, st *state, c instructions.Command) error {
	if ex, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if err := ex.Expand(r.plan.expander(st)); err != nil {
			return r.plan.errAt(c.Location(), err.Error())
		}
	}
	text := commandText(c)
	if layerStep(c) {
		return r.layer(ctx, st, c, text)
	}
	cfg := &st.cf.Config
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			cfg.Env = setEnv(cfg.Env, kv.Key, kv.Value)
		}
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			st.args[kv.Key] = argValue(kv, r.o.Args, r.plan.meta[kv.Key])
			text += "\x00" + kv.Key + "=" + st.args[kv.Key]
		}
	case *instructions.UserCommand:
		cfg.User = c.User
	case *instructions.EntrypointCommand:
		cfg.Entrypoint = r.argv(st, c.CmdLine, c.PrependShell)
		if !st.cmdSet {
			cfg.Cmd = nil // as docker: a new ENTRYPOINT drops the base's CMD
		}
	case *instructions.CmdCommand:
		cfg.Cmd, st.cmdSet = r.argv(st, c.CmdLine, c.PrependShell), true
	case *instructions.ExposeCommand:
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range c.Ports {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			cfg.ExposedPorts[p] = struct{}{}
		}
	case *instructions.LabelCommand:
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		for _, kv := range c.Labels {
			cfg.Labels[kv.Key] = kv.Value
		}
	case *instructions.ShellCommand:
		st.shell, cfg.Shell = c.Shell, c.Shell
	case *instructions.MaintainerCommand:
		st.cf.Author = c.Maintainer
	}
	st.key = chain(st.key, text)
	// Dated as the step before it, so that a rebuild whose every layer is
	// cached makes the very same config, and so the same image.
	st.cf.History = append(st.cf.History, v1.History{Created: lastCreated(&st.cf), CreatedBy: text, Comment: "smolvm build", EmptyLayer: true})
	return nil
}

// argv is a RUN, CMD or ENTRYPOINT's command: its shell form run by the
// stage's shell.
func (r *run) argv(st *state, cmdline []string, shell bool) []string {
	if !shell {
		return slices.Clone(cmdline)
	}
	return append(slices.Clone(st.shell), strings.Join(cmdline, " "))
}

// layer carries out a step that makes a layer, or takes it from the cache.
func (r *run) layer(ctx context.Context, st *state, c instructions.Command, text string) error {
	start := time.Now()
	n := r.p.begin(r.title(st, text))
	fail := func(err error) error {
		r.p.failed(n, err)
		return fmt.Errorf("%s:%d: %s: %w", r.plan.name, line(c.Location()), text, err)
	}
	mk, inputs, err := r.maker(ctx, st, c, n)
	if err != nil {
		return fail(err)
	}
	key := chain(st.key, text, inputs)
	hist := v1.History{Created: v1.Time{Time: time.Now().UTC()}, CreatedBy: text, Comment: "smolvm build"}
	if !r.o.NoCache {
		img, err := r.b.cache.get(ctx, r.b.images, key)
		if err != nil {
			return fail(err)
		}
		if img != nil {
			// The history (and its dates) up to here is the cached build's.
			cached, err := r.b.images.ConfigFile(ctx, img)
			if err != nil {
				return fail(err)
			}
			st.base, st.key, st.cf.History = img, key, cached.History
			r.p.cached(n)
			return nil
		}
	}
	dir, err := os.MkdirTemp(r.b.scratch, image.TempName()+"step-")
	if err != nil {
		return fail(err)
	}
	defer removeAll(dir)
	tarball, err := mk(dir)
	if err != nil {
		return fail(err)
	}
	st.cf.History = append(st.cf.History, hist)
	img, err := r.b.images.Commit(ctx, st.base, []string{tarball}, idle(st.cf), nil, cacheSource+key)
	if err != nil {
		return fail(err)
	}
	if err := r.b.cache.put(ctx, key, img.ID); err != nil {
		return fail(err)
	}
	st.base, st.key = img, key
	r.p.done(n, start)
	return nil
}

// maker returns what makes a layer step's tarball in a directory of its
// own, and the digest of the step's inputs beyond its text.
func (r *run) maker(ctx context.Context, st *state, c instructions.Command, n int) (func(dir string) (string, error), string, error) {
	switch c := c.(type) {
	case *instructions.RunCommand:
		return func(dir string) (string, error) { return r.runStep(ctx, st, c, n, dir) }, argsDigest(st.args), nil
	case *instructions.CopyCommand:
		return r.copyMaker(ctx, st, copySpec{SourcesAndDest: c.SourcesAndDest, from: c.From, chown: c.Chown})
	case *instructions.AddCommand:
		return r.copyMaker(ctx, st, copySpec{SourcesAndDest: c.SourcesAndDest, chown: c.Chown, add: true})
	case *instructions.WorkdirCommand:
		p := c.Path
		if !path.IsAbs(p) {
			p = path.Join(workdir(st), p)
		}
		st.cf.Config.WorkingDir = p
		return func(dir string) (string, error) { return r.mkdirStep(st, p, dir) }, "", nil
	}
	return nil, "", fmt.Errorf("unexpected %s", c.Name())
}

// idle is cf for a step's cached image: without the command, so that the
// next RUN's sandbox of it starts nothing of its own.
func idle(cf v1.ConfigFile) v1.ConfigFile {
	c := *cloneConfig(&cf)
	c.Config.Entrypoint, c.Config.Cmd = nil, nil
	return c
}

func cloneConfig(cf *v1.ConfigFile) *v1.ConfigFile {
	c := *cf
	c.Config.Env = slices.Clone(cf.Config.Env)
	c.Config.Cmd = slices.Clone(cf.Config.Cmd)
	c.Config.Entrypoint = slices.Clone(cf.Config.Entrypoint)
	c.Config.Shell = slices.Clone(cf.Config.Shell)
	c.Config.Labels = maps.Clone(cf.Config.Labels)
	c.Config.ExposedPorts = maps.Clone(cf.Config.ExposedPorts)
	c.History = slices.Clone(cf.History)
	return &c
}

// lastCreated is the date of cf's last history entry, or of cf.
func lastCreated(cf *v1.ConfigFile) v1.Time {
	if n := len(cf.History); n > 0 {
		return cf.History[n-1].Created
	}
	return cf.Created
}

func workdir(st *state) string {
	if st.cf.Config.WorkingDir == "" {
		return "/"
	}
	return st.cf.Config.WorkingDir
}

func setEnv(env []string, k, v string) []string {
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// argsDigest names the build args in scope, which a RUN sees.
func argsDigest(args map[string]string) string {
	keys := slices.Sorted(maps.Keys(args))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + args[k] + "\x00")
	}
	return b.String()
}

// commandText is an instruction as progress and history show it.
func commandText(c instructions.Command) string {
	if s, ok := c.(fmt.Stringer); ok {
		return s.String()
	}
	return strings.ToUpper(c.Name())
}
