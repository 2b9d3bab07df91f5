package build

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"smolvm.dev/smolvm/sandbox"
)

// copySpec is a COPY or ADD.
type copySpec struct {
	instructions.SourcesAndDest
	from  string // a stage or image; empty is the build context
	chown string
	add   bool
}

// readIgnore reads the context's .dockerignore, if it has one.
func readIgnore(dir string) (*patternmatcher.PatternMatcher, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("%w: .dockerignore: %v", ErrDockerfile, err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf("%w: .dockerignore: %v", ErrDockerfile, err)
	}
	return pm, nil
}

// ignored reports whether the context path rel is left out.
func (r *run) ignored(rel string) bool {
	if r.ignore == nil || rel == "." {
		return false
	}
	ok, err := r.ignore.MatchesOrParentMatches(filepath.ToSlash(rel))
	return err == nil && ok
}

// source is where a COPY reads: the context, or a stage's or an image's
// files, and what names that content for the cache.
type source struct {
	img     *sandbox.Image // nil: the context
	key     string         // a stage's or image's key
	context bool
}

func (r *run) copySource(ctx context.Context, st *state, from string) (source, error) {
	if from == "" {
		return source{context: true}, nil
	}
	if j := r.plan.stageIndex(from, st.index); j >= 0 {
		prev, err := r.stage(ctx, j)
		if err != nil {
			return source{}, err
		}
		return source{img: prev.base, key: prev.key}, nil
	}
	img, err := r.image(ctx, from)
	if err != nil {
		return source{}, err
	}
	return source{img: img, key: img.ID}, nil
}

// copyMaker prepares a COPY or ADD: its inputs' digest now, its layer
// when asked.
func (r *run) copyMaker(ctx context.Context, st *state, c copySpec) (func(string) (string, error), string, error) {
	src, err := r.copySource(ctx, st, c.from)
	if err != nil {
		return nil, "", err
	}
	dest := c.DestPath
	if !path.IsAbs(dest) {
		dest = path.Join(workdir(st), dest)
	}
	if strings.HasSuffix(c.DestPath, "/") || c.DestPath == "." {
		dest += "/"
	}
	inputs := "from " + src.key
	if src.context {
		if inputs, err = r.contextDigest(c); err != nil {
			return nil, "", err
		}
	}
	mk := func(dir string) (string, error) {
		return r.copyStep(st, c, src, dest, dir)
	}
	return mk, inputs, nil
}

// matches expands c's sources in root: globs, and, from the context, no
// ignored path.
func (r *run) matches(root string, c copySpec, context bool) ([]string, error) {
	var out []string
	for _, p := range c.SourcePaths {
		if c.add && (strings.Contains(p, "://") || strings.HasPrefix(p, "git@")) {
			return nil, fmt.Errorf("%w: ADD from a URL is not supported: download in a RUN step", ErrStep)
		}
		rel := strings.TrimPrefix(path.Clean("/"+p), "/")
		if rel == "" {
			rel = "."
		}
		found := []string{filepath.Join(root, rel)}
		if strings.ContainsAny(rel, "*?[") {
			m, err := filepath.Glob(filepath.Join(root, rel))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrStep, p, err)
			}
			found = m
		}
		n := 0
		for _, f := range found {
			fr, _ := filepath.Rel(root, f)
			if context && r.ignored(fr) {
				continue
			}
			// The source's directories are followed inside root only: a
			// stage's symlink to /etc must not copy the host's.
			rr, err := resolve(root, fr, false)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrStep, p, err)
			}
			if _, err := os.Lstat(filepath.Join(root, rr)); err != nil {
				continue
			}
			out = append(out, filepath.Join(root, rr))
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %s: not found", ErrStep, p)
		}
	}
	return out, nil
}

// walk calls fn for every file under each match, with its path relative
// to the match's parent; ignored context paths are left out.
func (r *run) walk(root string, matches []string, context bool, fn func(p, rel string, fi fs.FileInfo) error) error {
	for _, m := range matches {
		err := filepath.Walk(m, func(p string, fi fs.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if context {
				cr, _ := filepath.Rel(root, p)
				if r.ignored(cr) {
					if fi.IsDir() && !r.ignore.Exclusions() {
						return filepath.SkipDir
					}
					return nil
				}
			}
			rel, err := filepath.Rel(m, p)
			if err != nil {
				return err
			}
			return fn(p, filepath.ToSlash(rel), fi)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// contextDigest names the context files a COPY reads: paths, modes,
// link targets and content, not times, as docker's cache does.
func (r *run) contextDigest(c copySpec) (string, error) {
	ms, err := r.matches(r.o.Context, c, true)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "chown %s\x00", c.chown)
	err = r.walk(r.o.Context, ms, true, func(p, rel string, fi fs.FileInfo) error {
		cr, _ := filepath.Rel(r.o.Context, p)
		fmt.Fprintf(h, "%s\x00%o\x00", cr, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			h.Write([]byte(t))
			return err
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(h, f)
			return err
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return "context " + hex.EncodeToString(h.Sum(nil)), nil
}

// copyStep makes a COPY's layer in dir.
func (r *run) copyStep(st *state, c copySpec, src source, dest, dir string) (string, error) {
	vroot, release, err := r.b.view(st.base)
	if err != nil {
		return "", err
	}
	defer release()
	root := r.o.Context
	if !src.context {
		sroot, srelease, err := r.b.view(src.img)
		if err != nil {
			return "", err
		}
		defer srelease()
		root = sroot
	}
	owner, err := parseChown(vroot, c.chown)
	if err != nil {
		return "", err
	}
	ms, err := r.matches(root, c, src.context)
	if err != nil {
		return "", err
	}
	l, err := newLayerDir(dir, vroot)
	if err != nil {
		return "", err
	}
	defer l.root.Close()
	l.owner, l.keepOwner = owner, !src.context
	intoDir := strings.HasSuffix(dest, "/") || len(ms) > 1
	if !intoDir {
		rd, err := resolve(vroot, dest, true)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(filepath.Join(vroot, rd))
		intoDir = err == nil && fi.IsDir()
	}
	dest = path.Clean(dest)
	for _, m := range ms {
		fi, err := os.Lstat(m)
		if err != nil {
			return "", err
		}
		if c.add && fi.Mode().IsRegular() {
			if kind, err := archiveKind(m); err != nil {
				return "", fmt.Errorf("%w: %v", ErrStep, err)
			} else if kind != "" {
				if err := l.unpack(m, kind, dest); err != nil {
					return "", fmt.Errorf("%w: ADD %s: %v", ErrStep, filepath.Base(m), err)
				}
				continue
			}
		}
		base := dest
		if !fi.IsDir() && intoDir {
			base = path.Join(dest, filepath.Base(m))
		}
		err = r.walk(root, []string{m}, src.context, func(p, rel string, fi fs.FileInfo) error {
			if rel == "." && fi.IsDir() {
				// A directory's contents are copied, not the directory:
				// the destination keeps what it has, or is made new.
				rd, err := resolve(vroot, base, true)
				if err != nil {
					return err
				}
				return l.parents(rd)
			}
			return l.add(p, path.Join(base, rel), fi)
		})
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrStep, err)
		}
	}
	return l.tar(dir)
}

// mkdirStep makes WORKDIR's layer in dir: the directory and its parents.
func (r *run) mkdirStep(st *state, p, dir string) (string, error) {
	vroot, release, err := r.b.view(st.base)
	if err != nil {
		return "", err
	}
	defer release()
	l, err := newLayerDir(dir, vroot)
	if err != nil {
		return "", err
	}
	defer l.root.Close()
	rp, err := resolve(vroot, p, true)
	if err != nil {
		return "", err
	}
	if err := l.parents(rp); err != nil {
		return "", err
	}
	return l.tar(dir)
}

// parseChown reads --chown=USER[:GROUP], names looked up in the image's
// /etc/passwd and /etc/group; a user alone gives the group of its number.
func parseChown(view, s string) (*ids, error) {
	if s == "" {
		return nil, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	uid, err := lookupID(view, "/etc/passwd", u)
	if err != nil {
		return nil, err
	}
	gid := uid
	if hasGroup {
		if gid, err = lookupID(view, "/etc/group", g); err != nil {
			return nil, err
		}
	}
	return &ids{uid: uid, gid: gid}, nil
}

// lookupID is name's number in the image's passwd or group file, or
// name itself.
func lookupID(view, file, name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	rf, err := resolve(view, file, true)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(filepath.Join(view, rf))
	if err != nil {
		return 0, fmt.Errorf("%w: --chown %s: no %s in the image", ErrStep, name, filepath.Base(file))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 2 && fields[0] == name {
			if n, err := strconv.Atoi(fields[2]); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: --chown: no %s %q in the image's /etc/%s", ErrStep, map[bool]string{true: "user", false: "group"}[filepath.Base(file) == "passwd"], name, filepath.Base(file))
}
