package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Dir is where facts live, relative to the repository root.
const Dir = ".smolvm/memory"

// ErrNotFound is returned for an id that matches no fact.
var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such fact")

// Repo is the memory of one git repository.
type Repo struct {
	root string // repository top level
	dir  string // root/Dir
	now  func() time.Time
}

// Open finds the git repository containing dir.
func Open(ctx context.Context, dir string) (*Repo, error) {
	out, err := git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("open memory in %s: %w", dir, err)
	}
	root := strings.TrimSpace(out)
	return &Repo{
		root: root,
		dir:  filepath.Join(root, filepath.FromSlash(Dir)),
		now:  func() time.Time { return time.Now().UTC().Truncate(time.Second) },
	}, nil
}

// Root returns the repository's top-level directory.
func (r *Repo) Root() string { return r.root }

// Path returns the file a fact is stored in.
func (r *Repo) Path(id string) string { return filepath.Join(r.dir, id+".md") }

// Rel turns p, relative to base (or absolute), into a repository-relative
// slash path.
func (r *Repo) Rel(base, p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	root, err := filepath.EvalSymlinks(r.root)
	if err != nil {
		return "", err
	}
	// Resolve the deepest existing parent so a deleted file still maps.
	dir, rest := filepath.Clean(p), ""
	for {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			p = filepath.Join(real, rest)
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is outside the repository %s", p, r.root)
	}
	return filepath.ToSlash(rel), nil
}

// ParseAnchorAt is ParseAnchor with the path relative to base (or
// absolute) instead of the repository root.
func (r *Repo) ParseAnchorAt(base, spec string) (Anchor, error) {
	a, err := splitAnchor(spec)
	if err != nil {
		return Anchor{}, err
	}
	if a.Path == "" {
		return Anchor{}, fmt.Errorf("anchor %q: empty path", spec)
	}
	if a.Path, err = r.Rel(base, filepath.FromSlash(a.Path)); err != nil {
		return Anchor{}, fmt.Errorf("anchor %q: %w", spec, err)
	}
	if err := a.check(); err != nil {
		return Anchor{}, fmt.Errorf("anchor %q: %w", spec, err)
	}
	return a, nil
}

// List returns every fact, oldest first.
func (r *Repo) List(ctx context.Context) ([]*Fact, error) {
	ents, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list memory: %w", err)
	}
	var facts []*Fact
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || e.IsDir() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := r.load(id)
		if err != nil {
			return nil, err
		}
		facts = append(facts, f)
	}
	return facts, nil
}

// Get returns the fact with id, which may be any unique prefix.
func (r *Repo) Get(ctx context.Context, id string) (*Fact, error) {
	if id == "" {
		return nil, errors.New("empty fact id")
	}
	if validID(id) {
		f, err := r.load(id)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	ents, err := os.ReadDir(r.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list memory: %w", err)
	}
	var match []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".md"); ok && strings.HasPrefix(name, id) {
			match = append(match, name)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("fact %s: %w", id, ErrNotFound)
	case 1:
		return r.load(match[0])
	}
	return nil, fmt.Errorf("fact id %s is ambiguous: %s", id, strings.Join(match, ", "))
}

func (r *Repo) load(id string) (*Fact, error) {
	p := r.Path(id)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("load fact: %w", err)
	}
	f, err := ParseFact(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", p, err)
	}
	if f.ID != id {
		return nil, fmt.Errorf("load %s: file holds fact %s", p, f.ID)
	}
	return f, nil
}

// save writes f atomically so a crash never leaves half a fact.
func (r *Repo) save(f *Fact) error {
	data, err := f.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("save fact %s: %w", f.ID, err)
	}
	tmp, err := os.CreateTemp(r.dir, "."+f.ID+".*.tmp")
	if err != nil {
		return fmt.Errorf("save fact %s: %w", f.ID, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("save fact %s: %w", f.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save fact %s: %w", f.ID, err)
	}
	if err := os.Rename(tmp.Name(), r.Path(f.ID)); err != nil {
		return fmt.Errorf("save fact %s: %w", f.ID, err)
	}
	return nil
}

// AddOptions describes a new fact.
type AddOptions struct {
	Text    string
	Kind    Kind
	Author  string
	Anchors []Anchor // as from ParseAnchor; hashed against the working tree
	// Proposed files the fact for review instead of making it valid. The
	// caller decides, so the trust policy stays outside this package.
	Proposed   bool
	Supersedes string // id of a fact this one replaces once it is valid
}

// Add records a new fact.
func (r *Repo) Add(ctx context.Context, o AddOptions) (*Fact, error) {
	now := r.now()
	f := &Fact{
		ID:            newID(now),
		Kind:          o.Kind,
		Status:        Valid,
		Author:        o.Author,
		CreatedAt:     now,
		CreatedCommit: r.headCommit(ctx),
		Text:          strings.TrimSpace(o.Text),
	}
	if o.Supersedes != "" {
		old, err := r.Get(ctx, o.Supersedes)
		if err != nil {
			return nil, err
		}
		if old.Status.Closed() {
			return nil, fmt.Errorf("fact %s is already %s", old.ID, old.Status)
		}
		f.Supersedes = old.ID
	}
	for _, a := range o.Anchors {
		a, err := r.resolve(ctx, a)
		if err != nil {
			return nil, err
		}
		f.Anchors = append(f.Anchors, a)
	}
	why := ""
	if o.Proposed {
		f.Status, why = Proposed, "awaiting review"
	} else {
		f.ValidFrom = now
	}
	f.record(now, o.Author, "add", why)
	if err := f.check(); err != nil {
		return nil, err
	}
	if err := r.save(f); err != nil {
		return nil, err
	}
	if f.Status == Valid {
		if err := r.supersede(ctx, f, o.Author); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// supersede closes the fact that the now valid f replaces.
func (r *Repo) supersede(ctx context.Context, f *Fact, by string) error {
	if f.Supersedes == "" {
		return nil
	}
	old, err := r.Get(ctx, f.Supersedes)
	if err != nil {
		return err
	}
	if old.Status.Closed() {
		return nil
	}
	now := r.now()
	old.Status, old.InvalidatedAt, old.SupersededBy = Forgotten, now, f.ID
	old.Reason = "superseded by " + f.ID
	old.record(now, by, "supersede", old.Reason)
	return r.save(old)
}

// EditOptions changes a fact; zero fields are left as they are.
type EditOptions struct {
	Text    string
	Kind    Kind
	Anchors []Anchor // replaces all anchors, re-hashed
	By, Why string
}

// Edit changes a fact's text, kind or anchors. New anchors are hashed
// against the working tree, which makes a stale fact valid again.
func (r *Repo) Edit(ctx context.Context, id string, o EditOptions) (*Fact, error) {
	f, err := r.open(ctx, id, o.By)
	if err != nil {
		return nil, err
	}
	var what []string
	if t := strings.TrimSpace(o.Text); t != "" && t != f.Text {
		f.Text = t
		what = append(what, "text")
	}
	if o.Kind != "" && o.Kind != f.Kind {
		what = append(what, fmt.Sprintf("kind %s -> %s", f.Kind, o.Kind))
		f.Kind = o.Kind
	}
	now := r.now()
	if o.Anchors != nil {
		var anchors []Anchor
		for _, a := range o.Anchors {
			a, err := r.resolve(ctx, a)
			if err != nil {
				return nil, err
			}
			anchors = append(anchors, a)
		}
		what = append(what, "anchors "+anchorList(f.Anchors)+" -> "+anchorList(anchors))
		f.Anchors = anchors
		if f.Status == Stale {
			f.Status, f.ValidFrom = Valid, now
			what = append(what, "revalidated")
		}
	}
	if len(what) == 0 {
		return nil, fmt.Errorf("edit %s: nothing to change", f.ID)
	}
	f.record(now, o.By, "edit: "+strings.Join(what, "; "), o.Why)
	if err := r.save(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Confirm re-hashes a fact's anchors as they are now, following renames
// that verify found, and makes it valid: someone checked that it still holds.
func (r *Repo) Confirm(ctx context.Context, id, by, why string) (*Fact, error) {
	f, err := r.open(ctx, id, by)
	if err != nil {
		return nil, err
	}
	if f.Status == Proposed {
		return nil, fmt.Errorf("confirm %s: fact is proposed; use review --accept", f.ID)
	}
	var anchors []Anchor
	for _, a := range f.Anchors {
		if a.MovedTo != "" {
			a.Path = a.MovedTo
		}
		a, err := r.resolve(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("confirm %s: %w (re-anchor with edit --anchor, or forget it)", f.ID, err)
		}
		anchors = append(anchors, a)
	}
	now := r.now()
	what := "confirm: anchors " + anchorList(anchors) + " re-hashed"
	f.Anchors = anchors
	if f.Status == Stale {
		f.Status, f.ValidFrom = Valid, now
	}
	f.record(now, by, what, why)
	if err := r.save(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Forget closes a fact. It stays on disk with who and why.
func (r *Repo) Forget(ctx context.Context, id, by, why string) (*Fact, error) {
	if strings.TrimSpace(why) == "" {
		return nil, errors.New("forget: a reason is required")
	}
	f, err := r.open(ctx, id, by)
	if err != nil {
		return nil, err
	}
	now := r.now()
	f.Status, f.InvalidatedAt, f.Reason = Forgotten, now, why
	f.record(now, by, "forget", why)
	if err := r.save(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Review accepts or rejects a proposed fact. An accepted fact is checked
// against the working tree at once, so a proposal whose code has moved on
// since it was written comes out stale rather than valid.
func (r *Repo) Review(ctx context.Context, id string, accept bool, by, why string) (*Fact, error) {
	f, err := r.open(ctx, id, by)
	if err != nil {
		return nil, err
	}
	if f.Status != Proposed {
		return nil, fmt.Errorf("review %s: fact is %s, not proposed", f.ID, f.Status)
	}
	now := r.now()
	if !accept {
		if why == "" {
			why = "rejected in review"
		}
		f.Status, f.InvalidatedAt, f.Reason = Rejected, now, why
		f.record(now, by, "reject", why)
		return f, r.save(f)
	}
	f.Status, f.ValidFrom = Valid, now
	f.record(now, by, "accept", why)
	if _, err := r.verifyFact(ctx, f, by); err != nil {
		return nil, err
	}
	if err := r.save(f); err != nil {
		return nil, err
	}
	return f, r.supersede(ctx, f, by)
}

// open loads a fact that is about to change and checks the actor.
func (r *Repo) open(ctx context.Context, id, by string) (*Fact, error) {
	if err := checkActor(by); err != nil {
		return nil, fmt.Errorf("who: %w", err)
	}
	f, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if f.Status.Closed() {
		return nil, fmt.Errorf("fact %s is %s: %s", f.ID, f.Status, f.Reason)
	}
	return f, nil
}

func anchorList(as []Anchor) string {
	if len(as) == 0 {
		return "(none)"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// Result is what verify found for one fact.
type Result struct {
	Fact    *Fact
	Drifted []Anchor // anchors that no longer match, with Drift set
	Change  string   // "stale", "valid" (revalidated), or "" when unchanged
}

// Verify checks every valid or stale fact against the working tree. A fact
// with a drifted anchor becomes stale; a stale fact whose anchors match
// again becomes valid. Changes are written to the fact files with history.
func (r *Repo) Verify(ctx context.Context, by string) ([]Result, error) {
	facts, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var res []Result
	for _, f := range facts {
		if f.Status != Valid && f.Status != Stale {
			continue
		}
		before, err := f.Marshal()
		if err != nil {
			return nil, err
		}
		was := f.Status
		drifted, err := r.verifyFact(ctx, f, by)
		if err != nil {
			return nil, err
		}
		after, err := f.Marshal()
		if err != nil {
			return nil, err
		}
		if string(after) != string(before) {
			if err := r.save(f); err != nil {
				return nil, err
			}
		}
		change := ""
		if f.Status != was {
			change = string(f.Status)
		}
		res = append(res, Result{Fact: f, Drifted: drifted, Change: change})
	}
	return res, nil
}

// verifyFact updates f in memory from a check of its anchors and returns
// the drifted ones.
func (r *Repo) verifyFact(ctx context.Context, f *Fact, by string) ([]Anchor, error) {
	now := r.now()
	var drifted []Anchor
	var why []string
	for i, old := range f.Anchors {
		a, err := r.check(ctx, old)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", f.ID, err)
		}
		if a.Drift != "" {
			drifted = append(drifted, a)
			if a.Drift != old.Drift {
				why = append(why, a.String()+": "+a.Drift)
			}
		} else if a.Start != old.Start {
			f.record(now, by, "follow", fmt.Sprintf("%s moved unchanged to lines %d-%d", old, a.Start, a.End))
		}
		f.Anchors[i] = a
	}
	switch {
	case len(drifted) > 0 && (f.Status != Stale || len(why) > 0):
		f.Status = Stale
		f.record(now, by, "stale", strings.Join(why, "; "))
	case len(drifted) == 0 && f.Status == Stale:
		f.Status, f.ValidFrom = Valid, now
		f.record(now, by, "revalidate", "all anchors match again")
	}
	return drifted, nil
}

// Match is a fact returned by Recall with why it ranked where it did.
type Match struct {
	Fact   *Fact
	Score  int
	Reason string
}

// Recall returns the valid facts relevant to q, best first. If q names a
// path (relative to base) that exists or that a fact is anchored to, facts
// are ranked by how close their anchors are to it; otherwise q is a text
// query. Facts whose anchors have drifted since the last verify are left
// out even if not yet marked stale.
func (r *Repo) Recall(ctx context.Context, base, q string) ([]Match, error) {
	facts, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	facts = slices.DeleteFunc(facts, func(f *Fact) bool { return f.Status != Valid })
	p, isPath := r.recallPath(base, q, facts)
	var ms []Match
	for _, f := range facts {
		var m Match
		if isPath {
			m = r.pathScore(f, p)
		} else {
			m = textScore(f, q)
		}
		if m.Score == 0 {
			continue
		}
		fresh, err := r.fresh(ctx, f)
		if err != nil {
			return nil, err
		}
		if !fresh {
			continue
		}
		m.Fact = f
		ms = append(ms, m)
	}
	slices.SortStableFunc(ms, func(a, b Match) int {
		if a.Score != b.Score {
			return b.Score - a.Score
		}
		return strings.Compare(b.Fact.ID, a.Fact.ID) // newer first
	})
	return ms, nil
}

// fresh reports whether all of f's anchors still match.
func (r *Repo) fresh(ctx context.Context, f *Fact) (bool, error) {
	for _, a := range f.Anchors {
		a, err := r.check(ctx, a)
		if err != nil {
			return false, err
		}
		if a.Drift != "" {
			return false, nil
		}
	}
	return true, nil
}

// GitUser returns "human:" and git's user.name, or "" when it is unset.
func (r *Repo) GitUser(ctx context.Context) string {
	out, err := git(ctx, r.root, "config", "user.name")
	if name := strings.TrimSpace(out); err == nil && name != "" {
		return "human:" + name
	}
	return ""
}
