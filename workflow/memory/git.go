package memory

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// git runs the git CLI in dir and returns its stdout; a failure carries
// git's stderr.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// headCommit returns the id of HEAD, or "" in a repository without commits.
func (r *Repo) headCommit(ctx context.Context) string {
	out, err := git(ctx, r.root, "rev-parse", "-q", "--verify", "HEAD^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// findRename follows a path that is gone from the working tree: first an
// uncommitted rename, then the commit that deleted it (renames chained, so
// a file moved twice is found), then an object with the same id at HEAD.
// It returns "" when the path was deleted rather than moved. It never needs
// the commit the anchor was made at, so history rewrites do not break it.
func (r *Repo) findRename(ctx context.Context, p, blob string) (string, error) {
	if head := r.headCommit(ctx); head != "" {
		out, err := git(ctx, r.root, "diff", "-M", "--name-status", "-z", "HEAD", "--")
		if err != nil {
			return "", err
		}
		if to := renamedIn(out, p); to != "" {
			return r.existing(to), nil
		}
		for range 10 { // bounds a chain of renames
			del, err := git(ctx, r.root, "log", "-1", "--format=%H", "--diff-filter=D", "HEAD", "--", p)
			if err != nil {
				return "", err
			}
			del = strings.TrimSpace(del)
			if del == "" {
				break
			}
			out, err := git(ctx, r.root, "diff-tree", "-r", "-M", "--root", "--name-status", "-z", "--no-commit-id", del)
			if err != nil {
				return "", err
			}
			to := renamedIn(out, p)
			if to == "" {
				break
			}
			if r.existing(to) != "" {
				return to, nil
			}
			p = to
		}
	}
	if blob == "" || r.headCommit(ctx) == "" {
		return "", nil
	}
	out, err := git(ctx, r.root, "ls-tree", "-r", "-t", "-z", "HEAD")
	if err != nil {
		return "", err
	}
	for _, rec := range strings.Split(out, "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 && f[2] == blob {
			if r.existing(name) != "" {
				return name, nil
			}
		}
	}
	return "", nil
}

// renamedIn finds from's new name in -z --name-status output, where a
// rename or copy has two paths after its status and anything else one.
func renamedIn(out, from string) string {
	f := strings.Split(out, "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		status := f[i]
		if status == "" || (status[0] != 'R' && status[0] != 'C') {
			continue
		}
		if i+2 >= len(f) {
			break
		}
		if status[0] == 'R' && f[i+1] == from {
			return f[i+2]
		}
		i++
	}
	return ""
}

// existing returns p if it exists in the working tree, else "".
func (r *Repo) existing(p string) string {
	if _, err := os.Stat(r.abs(p)); err != nil {
		return ""
	}
	return p
}
