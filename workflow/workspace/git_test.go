package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/workflow/trust"
)

// gitRepo makes a repository with one commit and the given policy.
func gitRepo(t *testing.T, policyText string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{".smolvm/policy.toml": policyText, "a.txt": "one\n"})
	runGit(t, dir, "init", "-q", "-b", "main")
	runGit(t, dir, "config", "user.name", "Repo Owner")
	runGit(t, dir, "config", "user.email", "owner@example.com")
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func gateFor(t *testing.T, dir string, l *trust.Ledger) *trust.Gate {
	t.Helper()
	p, err := trust.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &trust.Gate{Policy: p, Ledger: l, Poll: 20 * time.Millisecond}
}

// approveNext answers the first approval that appears.
func approveNext(ctx context.Context, l *trust.Ledger, approve bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			aps, err := l.Approvals(ctx, false)
			if err == nil && len(aps) > 0 {
				done <- l.Answer(ctx, aps[0].ID, approve, "alice", "")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		done <- ctx.Err()
	}()
	return done
}

func TestCommit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, policy string
		approve      bool // for an ask
		commits      bool
	}{
		{"allow", "[git]\ncommit = \"allow\"\n", false, true},
		{"ask approved", "[git]\ncommit = \"ask\"\n", true, true},
		{"ask denied", "[git]\ncommit = \"ask\"\n", false, false},
		{"deny", "preset = \"read-only\"\n", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := gitRepo(t, tc.policy)
			before := runGit(t, dir, "rev-parse", "HEAD")
			writeFiles(t, dir, map[string]string{"b.txt": "two\n"})
			os.Remove(filepath.Join(dir, "a.txt"))
			l := openLedger(t)
			g := gateFor(t, dir, l)
			var answered <-chan error
			if g.Policy.Evaluate(trust.Action{Kind: trust.Commit}).Outcome == trust.Ask {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				answered = approveNext(actx, l, tc.approve)
			}
			t.Setenv("SMOLVM_AUTHOR", "agent:fixer <fixer@agents.example>")
			hash, err := Commit(ctx, g, dir, "fix things", "test")
			if answered != nil {
				if err := <-answered; err != nil {
					t.Fatalf("approver: %v", err)
				}
			}
			after := runGit(t, dir, "rev-parse", "HEAD")
			if !tc.commits {
				if !errors.Is(err, trust.ErrDenied) || after != before {
					t.Fatalf("commit: %v; HEAD %s -> %s", err, before, after)
				}
				if st := runGit(t, dir, "status", "--porcelain"); !strings.Contains(st, "?? b.txt") {
					t.Errorf("a denied commit staged changes: %q", st)
				}
				return
			}
			if err != nil || hash != after || after == before {
				t.Fatalf("commit: %q %v; HEAD %s -> %s", hash, err, before, after)
			}
			if got := runGit(t, dir, "log", "-1", "--format=%an <%ae>|%cn|%s"); got != "agent:fixer <fixer@agents.example>|Repo Owner|fix things" {
				t.Errorf("commit: %q", got)
			}
			if got := runGit(t, dir, "show", "--name-status", "--format=", "HEAD"); got != "D\ta.txt\nA\tb.txt" {
				t.Errorf("committed: %q", got)
			}
			recs, err := l.Audit(ctx, time.Time{})
			if err != nil || len(recs) != 1 || recs[0].Action.Kind != trust.Commit || recs[0].Outcome != trust.Allow {
				t.Errorf("audit: %v %+v", err, recs)
			}
		})
	}
}

func TestCommitNothing(t *testing.T) {
	dir := gitRepo(t, "[git]\ncommit = \"allow\"\n")
	l := openLedger(t)
	_, err := Commit(context.Background(), gateFor(t, dir, l), dir, "empty", "test")
	if !errors.Is(err, ErrNothingToCommit) {
		t.Fatalf("commit: %v", err)
	}
	if recs, _ := l.Audit(context.Background(), time.Time{}); len(recs) != 0 {
		t.Errorf("audited %+v", recs)
	}
}

// TestPush pushes to a local bare remote: autofix-tests denies it,
// trusted asks and an approval lets it through.
func TestPush(t *testing.T) {
	ctx := context.Background()
	remote := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", remote).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	dir := gitRepo(t, "preset = \"autofix-tests\"\n")
	runGit(t, dir, "remote", "add", "origin", remote)
	l := openLedger(t)

	err := Push(ctx, gateFor(t, dir, l), dir, "origin", "main", "test")
	var de *trust.DeniedError
	if !errors.As(err, &de) || !strings.Contains(de.Decision.RuleText(), "preset:autofix-tests") {
		t.Fatalf("push under autofix-tests: %v", err)
	}
	if out, _ := exec.Command("git", "-C", remote, "rev-parse", "--verify", "-q", "main").Output(); len(out) != 0 {
		t.Fatal("denied push reached the remote")
	}

	writeFiles(t, dir, map[string]string{".smolvm/policy.toml": "preset = \"trusted\"\n"})
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	answered := approveNext(actx, l, true)
	if err := Push(ctx, gateFor(t, dir, l), dir, "origin", "main", "test"); err != nil {
		t.Fatalf("push under trusted: %v", err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if got, want := runGit(t, remote, "rev-parse", "main"), runGit(t, dir, "rev-parse", "HEAD"); got != want {
		t.Fatalf("remote main %s, want %s", got, want)
	}
	recs, err := l.Audit(ctx, time.Time{})
	if err != nil || len(recs) != 2 || recs[0].Outcome != trust.Deny || recs[1].Outcome != trust.Allow ||
		recs[1].By != "alice" || recs[1].Action.String() != "git-push origin main" {
		t.Fatalf("audit: %v %+v", err, recs)
	}

	if err := Push(ctx, gateFor(t, dir, l), dir, "--upload-pack=evil", "", "test"); err == nil {
		t.Fatal("an option as the remote was accepted")
	}
}

func TestAuthorEnv(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"agent:claude":           "GIT_AUTHOR_NAME=agent:claude",
		"Ann Lee <ann@x.org>":    "GIT_AUTHOR_NAME=Ann Lee GIT_AUTHOR_EMAIL=ann@x.org",
		" Bob  <bob@y.org> ":     "GIT_AUTHOR_NAME=Bob GIT_AUTHOR_EMAIL=bob@y.org",
		"agent:x <agent@x.test>": "GIT_AUTHOR_NAME=agent:x GIT_AUTHOR_EMAIL=agent@x.test",
	} {
		if got := strings.Join(authorEnv(in), " "); got != want {
			t.Errorf("authorEnv(%q) = %q, want %q", in, got, want)
		}
	}
}
