package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/errdefs"
)

// scratch is the host side of a run: a bare clone of the user's
// repository that shares its objects (nothing is written to the user's
// .git), holding the base commit and one commit per iteration. Git runs
// here, on the host, with external diff drivers and text conversion off,
// so a sandbox cannot change what a diff shows.
type scratch struct {
	dir  string // the temporary directory
	git  string // the bare repository
	tree string // the base work tree, copied into sandboxes
	repo string // the user's repository
	base string // the base commit: HEAD plus the uncommitted changes
}

// excluded never count as changes: what running tests leaves behind.
var excluded = "__pycache__/\n*.pyc\n.pytest_cache/\nnode_modules/\n.smolvm-runner/\n"

// newScratch clones repo and records its working tree, uncommitted
// changes included, as the base commit.
// It lives in dir, which must not exist yet, or in a temporary directory.
func newScratch(ctx context.Context, repo, dir string) (*scratch, error) {
	top, err := gitOut(ctx, repo, nil, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s is not a git repository: %v", repo, err))
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "smolvm-agent-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	} else if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	s := &scratch{dir: dir, git: filepath.Join(dir, "git"), tree: filepath.Join(dir, "base"), repo: strings.TrimSpace(top)}
	if err := s.init(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *scratch) init(ctx context.Context) error {
	if _, err := gitOut(ctx, "", nil, "clone", "-q", "--bare", "--shared", s.repo, s.git); err != nil {
		return fmt.Errorf("clone %s: %w", s.repo, err)
	}
	if err := os.WriteFile(filepath.Join(s.git, "info", "exclude"), []byte(excluded), 0o644); err != nil {
		return err
	}
	if err := copyTree(s.repo, s.tree); err != nil {
		return fmt.Errorf("copy %s: %w", s.repo, err)
	}
	head, err := s.run(ctx, "", "rev-parse", "HEAD")
	if err != nil {
		return fmt.Errorf("%s has no commit: %w", s.repo, err)
	}
	s.base, err = s.commit(ctx, s.tree, head, "smolvm agent: the working tree at the start")
	return err
}

func (s *scratch) close() { os.RemoveAll(s.dir) }

// commit records tree as a commit on parent and returns it; when nothing
// changed it returns parent.
func (s *scratch) commit(ctx context.Context, tree, parent, msg string) (string, error) {
	index := filepath.Join(s.dir, "index")
	os.Remove(index)
	env := []string{"GIT_INDEX_FILE=" + index}
	if _, err := s.runEnv(ctx, tree, env, "read-tree", parent); err != nil {
		return "", err
	}
	if _, err := s.runEnv(ctx, tree, env, "add", "-A", "."); err != nil {
		return "", err
	}
	t, err := s.runEnv(ctx, tree, env, "write-tree")
	if err != nil {
		return "", err
	}
	if pt, _ := s.run(ctx, "", "rev-parse", parent+"^{tree}"); pt == t {
		return parent, nil
	}
	return s.run(ctx, "", "-c", "user.name=smolvm", "-c", "user.email=smolvm@localhost",
		"commit-tree", t, "-p", parent, "-m", msg)
}

// diff is git diff between two commits, as the guard reads it.
func (s *scratch) diff(ctx context.Context, from, to string) (string, error) {
	return s.run(ctx, "", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", from, to)
}

// file returns a file's content at a commit.
func (s *scratch) file(ctx context.Context, commit, path string) ([]byte, error) {
	out, err := gitBytes(ctx, "", []string{"GIT_DIR=" + s.git}, "cat-file", "blob", commit+":"+path)
	if err != nil {
		return nil, fmt.Errorf("read %s at %s: %w", path, short(commit), err)
	}
	return out, nil
}

// files lists the files of a commit.
func (s *scratch) files(ctx context.Context, commit string) ([]string, error) {
	out, err := s.run(ctx, "", "ls-tree", "-r", "-z", "--name-only", commit)
	if err != nil {
		return nil, err
	}
	return strings.FieldsFunc(out, func(r rune) bool { return r == 0 }), nil
}

func (s *scratch) run(ctx context.Context, tree string, args ...string) (string, error) {
	return s.runEnv(ctx, tree, nil, args...)
}

func (s *scratch) runEnv(ctx context.Context, tree string, env []string, args ...string) (string, error) {
	env = append(env, "GIT_DIR="+s.git)
	if tree != "" {
		env = append(env, "GIT_WORK_TREE="+tree)
	}
	return gitOut(ctx, tree, env, args...)
}

func gitOut(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	out, err := gitBytes(ctx, dir, env, args...)
	return strings.TrimSpace(string(out)), err
}

func gitBytes(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	// The user's hooks, attributes and global config stay out of it.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// copyTree copies the regular files, directories and symlinks of src to
// dst, leaving out .git.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.Name() == ".git" && rel != "." {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case d.Type().IsRegular():
			return copyFile(p, to, info.Mode().Perm())
		}
		return nil // sockets, fifos, devices: not part of a repository
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// CheckRepo returns an ErrInvalid error unless repo is a git work tree,
// so a caller can refuse a run before starting it.
func CheckRepo(ctx context.Context, repo string) error {
	if _, err := gitOut(ctx, repo, nil, "rev-parse", "--show-toplevel"); err != nil {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s is not a git repository: %v", repo, err))
	}
	return nil
}
