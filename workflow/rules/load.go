package rules

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// maxImportDepth is how many @import hops are followed from a CLAUDE.md,
// matching Claude Code's own limit.
const maxImportDepth = 5

// skipDirs are directories that never hold a project's own rules but can
// hold huge trees of files.
var skipDirs = map[string]bool{
	".git": true, ".hg": true, ".svn": true, ".jj": true,
	"node_modules": true, "vendor": true, "bower_components": true,
	".venv": true, "venv": true, "__pycache__": true, ".tox": true, ".nox": true,
	".mypy_cache": true, ".pytest_cache": true, ".ruff_cache": true,
	".next": true, ".nuxt": true, ".svelte-kit": true, ".turbo": true, ".cache": true,
	".gradle": true, ".terraform": true, ".direnv": true, "target": true,
}

// Repo is everything known about the rule files of one repository.
type Repo struct {
	Root string // absolute path of the repository root
	// Rules are in precedence order: a later rule wins over an earlier one.
	Rules []Rule
	// Files are the slash paths, relative to Root, of every file walked.
	Files []string
	// Sizes maps each rule file read, imports included, to its size in bytes.
	Sizes map[string]int
	// Findings are the problems met while loading.
	Findings []Finding
}

// FindRoot returns the nearest directory at or above start that contains
// .git (a directory, or a file in worktrees and submodules).
func FindRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no .git found at or above %s (use --root)", start)
		}
		dir = parent
	}
}

// Load walks the repository at root and parses every rule file in it.
// Unreadable and malformed files become findings, not errors.
func Load(ctx context.Context, root string) (*Repo, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("load rules: %s is not a directory", root)
	}
	l := &loader{repo: &Repo{Root: root, Sizes: map[string]int{}}}
	var found []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if err != nil {
			if p == root {
				return err
			}
			l.finding(Error, "unreadable", rel, 0, "cannot read: %v", pathErr(err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), "bazel-")) {
				return fs.SkipDir
			}
			return nil
		}
		l.repo.Files = append(l.repo.Files, rel)
		if isRuleFile(rel) {
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load rules from %s: %w", root, err)
	}
	for _, rel := range found {
		l.load(rel)
	}
	l.applyOverrides()
	sort.SliceStable(l.repo.Rules, func(i, j int) bool {
		a, b := &l.repo.Rules[i], &l.repo.Rules[j]
		if da, db := depth(a.Dir), depth(b.Dir); da != db {
			return da < db
		}
		return a.Tier < b.Tier
	})
	return l.repo, nil
}

// pathErr drops the path from a *fs.PathError: findings name the file.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ruleDirs are the directories whose files are individual rules, by format.
var ruleDirs = []struct{ dir, format string }{
	{".claude/rules", "claude"},
	{".cursor/rules", "cursor"},
	{".windsurf/rules", "windsurf"},
}

// inRuleDir splits a path inside one of ruleDirs into the directory the
// rules apply to and the format.
func inRuleDir(rel string) (scope, format string, ok bool) {
	for _, rd := range ruleDirs {
		if strings.HasPrefix(rel, rd.dir+"/") {
			return ".", rd.format, true
		}
		if i := strings.Index(rel, "/"+rd.dir+"/"); i >= 0 {
			return rel[:i], rd.format, true
		}
	}
	return "", "", false
}

func isRuleFile(rel string) bool {
	switch path.Base(rel) {
	case "AGENTS.md", "AGENTS.override.md", "CLAUDE.md", "GEMINI.md":
		return true
	}
	if rel == ".cursorrules" || rel == ".windsurfrules" {
		return true
	}
	_, _, ok := inRuleDir(rel)
	return ok && (strings.HasSuffix(rel, ".md") || strings.HasSuffix(rel, ".mdc"))
}

type loader struct {
	repo *Repo
}

func (l *loader) finding(sev Severity, code, file string, line int, format string, args ...any) {
	l.repo.Findings = append(l.repo.Findings, Finding{
		Severity: sev, Code: code, File: file, Line: line, Message: fmt.Sprintf(format, args...),
	})
}

func (l *loader) issues(file string, issues []issue) {
	for _, is := range issues {
		l.finding(is.sev, is.code, file, is.line, "%s", is.msg)
	}
}

// read returns the text of a regular file with LF line endings.
func (l *loader) read(rel string) (string, bool) {
	p := filepath.Join(l.repo.Root, filepath.FromSlash(rel))
	fi, err := os.Stat(p)
	if err != nil {
		l.finding(Error, "unreadable", rel, 0, "cannot read: %v", pathErr(err))
		return "", false
	}
	if !fi.Mode().IsRegular() {
		l.finding(Error, "unreadable", rel, 0, "not a regular file")
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		l.finding(Error, "unreadable", rel, 0, "cannot read: %v", pathErr(err))
		return "", false
	}
	l.repo.Sizes[rel] = len(b)
	return strings.ReplaceAll(string(b), "\r\n", "\n"), true
}

// add appends r with raw as its text, which starts at line of r.Source.
// Blank text adds nothing.
func (l *loader) add(r Rule, raw string, line int) {
	trimmed := strings.TrimLeft(raw, " \t\r\n")
	line += strings.Count(raw[:len(raw)-len(trimmed)], "\n")
	r.Text = normalize(raw)
	if r.Text == "" {
		return
	}
	r.Line = line
	r.Hash = hashText(r.Text)
	l.repo.Rules = append(l.repo.Rules, r)
}

func (l *loader) load(rel string) {
	dir := path.Dir(rel)
	switch base := path.Base(rel); {
	case rel == ".cursorrules":
		l.loadWhole(Rule{Source: rel, Format: "cursor", Name: rel, Dir: ".", Activation: Always, Tier: TierLegacy})
	case rel == ".windsurfrules":
		l.loadWhole(Rule{Source: rel, Format: "windsurf", Name: rel, Dir: ".", Activation: Always, Tier: TierLegacy})
	case base == "AGENTS.md":
		l.loadWhole(Rule{Source: rel, Format: "agents", Name: rel, Dir: dir, Activation: Always, Tier: TierInstructions})
	case base == "AGENTS.override.md":
		l.loadWhole(Rule{Source: rel, Format: "agents", Name: rel, Dir: dir, Activation: Always, Tier: TierOverride})
	case base == "GEMINI.md":
		l.loadWhole(Rule{Source: rel, Format: "gemini", Name: rel, Dir: dir, Activation: Always, Tier: TierInstructions})
	case base == "CLAUDE.md":
		r := Rule{Source: rel, Format: "claude", Name: rel, Dir: dir, Activation: Always, Tier: TierInstructions}
		l.loadClaude(r, []string{rel})
	default:
		l.loadRuleFile(rel)
	}
}

func (l *loader) loadWhole(r Rule) {
	if text, ok := l.read(r.Source); ok {
		l.add(r, text, 1)
	}
}

var importRe = lazyre.New(`^@(\S+)$`)

// loadClaude adds r.Source split at its @import lines, with each imported
// file's rules in place of the line that imports it. chain holds the files
// being imported, outermost first.
func (l *loader) loadClaude(r Rule, chain []string) {
	text, ok := l.read(r.Source)
	if !ok {
		return
	}
	var seg strings.Builder
	start, fence := 1, ""
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
		case fence != "" && strings.HasPrefix(t, fence):
			fence = ""
		case fence == "":
			if m := importRe().FindStringSubmatch(t); m != nil {
				l.add(r, seg.String(), start)
				seg.Reset()
				start = i + 2
				l.follow(r, i+1, m[1], chain)
				continue
			}
		}
		seg.WriteString(line)
		seg.WriteByte('\n')
	}
	l.add(r, seg.String(), start)
}

// follow loads the file that an @import at line n of from.Source names.
func (l *loader) follow(from Rule, n int, target string, chain []string) {
	file := from.Source
	if strings.HasPrefix(target, "~") || path.IsAbs(target) {
		l.finding(Warning, "import-outside", file, n, "@%s: imports from outside the repository are not followed", target)
		return
	}
	resolved := path.Join(path.Dir(file), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		l.finding(Warning, "import-outside", file, n, "@%s: imports from outside the repository are not followed", target)
		return
	}
	if slices.Contains(chain, resolved) {
		l.finding(Error, "import-cycle", file, n, "@%s: import cycle %s -> %s", target, strings.Join(chain, " -> "), resolved)
		return
	}
	if len(chain) > maxImportDepth {
		l.finding(Warning, "import-depth", file, n, "@%s: not followed, imports nest deeper than %d levels", target, maxImportDepth)
		return
	}
	if _, err := os.Stat(filepath.Join(l.repo.Root, filepath.FromSlash(resolved))); err != nil {
		l.finding(Error, "import-unresolved", file, n, "@%s: %s does not resolve: %v", target, resolved, pathErr(err))
		return
	}
	r := from
	r.Source, r.ImportedBy = resolved, fmt.Sprintf("%s:%d", file, n)
	l.loadClaude(r, append(slices.Clip(chain), resolved))
}

// loadRuleFile adds a file from .claude/rules, .cursor/rules or
// .windsurf/rules, whose frontmatter says when it applies.
func (l *loader) loadRuleFile(rel string) {
	scope, format, _ := inRuleDir(rel)
	if format == "cursor" && path.Ext(rel) == ".md" {
		l.finding(Warning, "cursor-md-ignored", rel, 0, "Cursor only reads .mdc files in .cursor/rules; rename it to %s", strings.TrimSuffix(path.Base(rel), ".md")+".mdc")
		return
	}
	if format != "cursor" && path.Ext(rel) != ".md" {
		return
	}
	text, ok := l.read(rel)
	if !ok {
		return
	}
	fm, body, issues := parseFrontmatter(text)
	l.issues(rel, issues)
	r := Rule{
		Source: rel, Format: format, Dir: scope, Tier: TierRuleFile,
		Name: strings.TrimSuffix(path.Base(rel), path.Ext(rel)),
	}
	if f, ok := fm.get("description"); ok {
		r.Description = strings.TrimSpace(f.value)
	}
	globKey := map[string]string{"claude": "paths", "cursor": "globs", "windsurf": "globs"}[format]
	if f, ok := fm.get(globKey); ok {
		if f.nested {
			l.finding(Error, "frontmatter-invalid", rel, f.line, "%s must be a glob, a comma-separated list of globs or a list of globs", globKey)
		}
		r.Globs = f.globs()
		l.checkGlobs(rel, f.line, scope, r.Globs)
	}
	switch format {
	case "claude":
		r.Activation = Always
		if len(r.Globs) > 0 {
			r.Activation = Glob
		}
	case "cursor":
		r.Activation = l.cursorActivation(rel, &fm, &r)
	case "windsurf":
		r.Activation = l.windsurfActivation(rel, &fm, &r)
	}
	l.add(r, body, fm.bodyLine)
}

// cursorActivation follows Cursor's rule types: always, auto-attached by
// globs, agent-requested by description, or manual.
func (l *loader) cursorActivation(rel string, fm *frontmatter, r *Rule) Activation {
	if f, ok := fm.get("alwaysApply"); ok && !f.null {
		v := strings.ToLower(f.value)
		switch {
		case f.isList || f.nested || (v != "true" && v != "false"):
			l.finding(Error, "frontmatter-invalid", rel, f.line, "alwaysApply must be true or false")
		case f.quoted:
			l.finding(Error, "always-apply-string", rel, f.line, "alwaysApply is the string %q, not a boolean; write alwaysApply: %s without quotes", f.value, v)
		}
		if v == "true" {
			return Always
		}
	}
	switch {
	case len(r.Globs) > 0:
		return Glob
	case r.Description != "":
		return OnRequest
	}
	return Manual
}

// windsurfActivation maps Windsurf's trigger field.
func (l *loader) windsurfActivation(rel string, fm *frontmatter, r *Rule) Activation {
	f, ok := fm.get("trigger")
	if !ok || f.null {
		l.finding(Warning, "windsurf-no-trigger", rel, 0, "no trigger in frontmatter; treated as manual (set trigger: always_on, glob, model_decision or manual)")
		return Manual
	}
	switch f.value {
	case "always_on":
		return Always
	case "glob":
		if len(r.Globs) == 0 {
			l.finding(Error, "frontmatter-invalid", rel, f.line, "trigger: glob needs globs")
			return Manual
		}
		return Glob
	case "model_decision":
		return OnRequest
	case "manual":
		return Manual
	}
	l.finding(Error, "frontmatter-invalid", rel, f.line, "trigger %q is not always_on, glob, model_decision or manual", f.value)
	return Manual
}

// applyOverrides marks each AGENTS.md that an AGENTS.override.md in the
// same directory replaces.
func (l *loader) applyOverrides() {
	overrides := map[string]string{}
	for _, r := range l.repo.Rules {
		if r.Tier == TierOverride {
			overrides[r.Dir] = r.Source
		}
	}
	for i := range l.repo.Rules {
		r := &l.repo.Rules[i]
		if r.Format == "agents" && r.Tier == TierInstructions && overrides[r.Dir] != "" {
			r.OverriddenBy = overrides[r.Dir]
		}
	}
}

// checkGlobs reports globs that are invalid or match no file below scope.
func (l *loader) checkGlobs(rel string, line int, scope string, globs []string) {
	probe := Rule{Dir: scope}
	for _, g := range globs {
		if !validGlob(g) {
			l.finding(Error, "glob-invalid", rel, line, "glob %q is not a valid pattern", g)
			continue
		}
		probe.Globs = []string{g}
		if !slices.ContainsFunc(l.repo.Files, func(f string) bool { _, ok := probe.matchingGlob(f); return ok }) {
			where := "the repository"
			if scope != "." {
				where = scope + "/"
			}
			l.finding(Warning, "glob-no-match", rel, line, "glob %q matches no file in %s", g, where)
		}
	}
}
