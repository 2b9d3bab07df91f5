package branch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/runner"
)

// gitDir is a run's bare repository: the base commit, one ref per
// branch, the merge commits and the integration branch. Git runs on the
// host with the user's config, hooks and attributes out of it.
type gitDir string

func git(ctx context.Context, dir string, args ...string) ([]byte, int, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), ee.ExitCode(), fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return nil, -1, fmt.Errorf("git %s: %w", args[0], err)
	}
	return stdout.Bytes(), 0, nil
}

func (g gitDir) run(ctx context.Context, args ...string) (string, error) {
	out, _, err := git(ctx, "", append([]string{"--git-dir", string(g)}, args...)...)
	return strings.TrimSpace(string(out)), err
}

// commit records tree as a commit with parents.
func (g gitDir) commit(ctx context.Context, tree, msg string, parents ...string) (string, error) {
	args := []string{"-c", "user.name=smolvm", "-c", "user.email=smolvm@localhost", "commit-tree", tree, "-m", msg}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	return g.run(ctx, args...)
}

// fetch copies commit from another repository and points ref at it.
func (g gitDir) fetch(ctx context.Context, from, commit, ref string) error {
	if _, err := g.run(ctx, "fetch", "-q", from, commit+":"+ref); err != nil {
		return fmt.Errorf("fetch %s: %w", short(commit), err)
	}
	return nil
}

func (g gitDir) setRef(ctx context.Context, ref, commit string) error {
	_, err := g.run(ctx, "update-ref", ref, commit)
	return err
}

// mergeTree merges a and b without a work tree: the merged tree (with
// conflict markers in conflicted files) and the conflicted paths.
func (g gitDir) mergeTree(ctx context.Context, a, b string) (string, []string, error) {
	out, code, err := git(ctx, "", "--git-dir", string(g), "merge-tree", "--write-tree", "--name-only", "--no-messages", a, b)
	if code != 0 && code != 1 {
		return "", nil, fmt.Errorf("merge %s and %s: %w", short(a), short(b), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var files []string
	if code == 1 {
		for _, l := range lines[1:] {
			if l == "" {
				break
			}
			files = append(files, l)
		}
		if len(files) == 0 {
			files = []string{"(unnamed conflict)"}
		}
	}
	return lines[0], files, nil
}

// diffLines is the number of lines added plus removed from a to b.
func (g gitDir) diffLines(ctx context.Context, a, b string) (int, error) {
	out, err := g.run(ctx, "diff", "--numstat", "--no-ext-diff", "--no-textconv", "--no-renames", a, b)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		add, _ := strconv.Atoi(f[0]) // "-" for a binary file counts 0
		del, _ := strconv.Atoi(f[1])
		n += add + del
	}
	return n, nil
}

// sync makes the repository in sandbox sb, which holds commit from's
// tree (plus what set-up left beside it), hold to's: changed files are
// written, deleted ones removed, modes and symlinks kept.
func (g gitDir) sync(ctx context.Context, svc sandbox.Service, sb, from, to string) error {
	out, _, err := git(ctx, "", "--git-dir", string(g), "diff", "--raw", "-z", "--no-renames", "--no-ext-diff", from, to)
	if err != nil {
		return err
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	var rm, exe []string
	var links [][2]string
	for i := 0; i+1 < len(f); i += 2 {
		meta, name := strings.Fields(strings.TrimPrefix(f[i], ":")), f[i+1]
		if len(meta) < 5 {
			return fmt.Errorf("sync: unexpected diff line %q", f[i])
		}
		mode, status := meta[1], meta[4]
		dst := path.Join(runner.Dir, name)
		if status == "D" || mode == "160000" {
			rm = append(rm, dst)
			continue
		}
		data, _, err := git(ctx, "", "--git-dir", string(g), "cat-file", "blob", to+":"+name)
		if err != nil {
			return err
		}
		switch mode {
		case "120000":
			links = append(links, [2]string{string(data), dst})
			continue
		case "100755":
			exe = append(exe, dst)
		}
		if err := svc.WriteFile(ctx, sb, dst, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	var script strings.Builder
	if len(rm) > 0 {
		script.WriteString("rm -rf --")
		for _, p := range rm {
			script.WriteString(" " + quote(p))
		}
		script.WriteString(" && ")
	}
	for _, l := range links {
		fmt.Fprintf(&script, "mkdir -p %s && ln -sfn %s %s && ", quote(path.Dir(l[1])), quote(l[0]), quote(l[1]))
	}
	if len(exe) > 0 {
		script.WriteString("chmod +x --")
		for _, p := range exe {
			script.WriteString(" " + quote(p))
		}
		script.WriteString(" && ")
	}
	if script.Len() == 0 {
		return nil
	}
	script.WriteString("true")
	var stderr bytes.Buffer
	exit, err := svc.Exec(ctx, sb, sandbox.Process{Args: []string{"sh", "-c", script.String()}}, sandbox.Stdio{Stderr: &stderr})
	if err == nil && (exit.Code != 0 || exit.Error != "") {
		err = fmt.Errorf("exit %d %s: %s", exit.Code, exit.Error, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", sb, err)
	}
	return nil
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
