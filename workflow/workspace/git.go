package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/trust"
)

// ErrNothingToCommit is returned by Commit for a tree without changes.
var ErrNothingToCommit = errdefs.New(errdefs.ErrConflict, "nothing to commit")

// Commit stages every change in the git work tree (git add -A) and commits
// it with msg, once gate allows the git-commit action. Git runs on the
// host, never in a sandbox. The author comes from git's configuration,
// or from $SMOLVM_AUTHOR ("NAME" or "NAME <EMAIL>") when it is set.
// It returns the new commit's hash.
func Commit(ctx context.Context, gate *trust.Gate, tree, msg, requester string) (string, error) {
	if strings.TrimSpace(msg) == "" {
		return "", errors.New("commit: empty message")
	}
	status, err := git(ctx, tree, nil, "status", "--porcelain")
	if err != nil {
		return "", err
	}
	if status == "" {
		return "", fmt.Errorf("commit in %s: %w", tree, ErrNothingToCommit)
	}
	if err := gate.Check(ctx, trust.Action{Kind: trust.Commit}, requester); err != nil {
		return "", err
	}
	if _, err := git(ctx, tree, nil, "add", "-A"); err != nil {
		return "", err
	}
	if _, err := git(ctx, tree, authorEnv(os.Getenv("SMOLVM_AUTHOR")), "commit", "-q", "-m", msg); err != nil {
		return "", err
	}
	return git(ctx, tree, nil, "rev-parse", "HEAD")
}

// Push runs git push [REMOTE [BRANCH]] in the work tree once gate allows
// the git-push action. Empty remote and branch leave the choice to git.
func Push(ctx context.Context, gate *trust.Gate, tree, remote, branch, requester string) error {
	if remote == "" && branch != "" {
		return errors.New("push: a branch needs a remote")
	}
	args := []string{"push"}
	for _, a := range []string{remote, branch} {
		if strings.HasPrefix(a, "-") {
			return fmt.Errorf("push: %q is not a remote or branch", a)
		}
		if a != "" {
			args = append(args, a)
		}
	}
	// The destination is part of the action, so an approver sees it.
	act := trust.Action{Kind: trust.Push, Target: strings.TrimSpace(remote + " " + branch)}
	if err := gate.Check(ctx, act, requester); err != nil {
		return err
	}
	_, err := git(ctx, tree, nil, args...)
	return err
}

// authorEnv turns $SMOLVM_AUTHOR into git's author variables.
func authorEnv(author string) []string {
	author = strings.TrimSpace(author)
	if author == "" {
		return nil
	}
	name, email, ok := strings.Cut(author, "<")
	if !ok {
		return []string{"GIT_AUTHOR_NAME=" + author}
	}
	return []string{
		"GIT_AUTHOR_NAME=" + strings.TrimSpace(name),
		"GIT_AUTHOR_EMAIL=" + strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(email), ">")),
	}
}

// git runs the git CLI in tree and returns its trimmed output.
func git(ctx context.Context, tree string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", tree}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return strings.TrimSpace(out.String()), nil
}
