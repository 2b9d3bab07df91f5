package forge

import (
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/forge/forgetest"
)

// TestGiteaServer runs the Gitea client against a real Gitea (built from
// its Go module by scripts/gitea-tools.sh): issues read through the URL
// Gitea itself gives them, closed and locked ones as such, a pull request
// refused as an issue, a draft PR from a pushed branch opened as Gitea's
// work in progress, a second one a conflict, and Gitea's own errors (a
// missing branch is its 404).
func TestGiteaServer(t *testing.T) {
	start := time.Now()
	g := forgetest.NewGitea(t)
	t.Logf("gitea up in %s", time.Since(start).Round(time.Millisecond))
	g.CreateRepo(t, "app")
	work := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "start"},
		{"push", "-q", g.Remote("app"), "main"},
		{"commit", "-q", "--allow-empty", "-m", "the fix"}, {"push", "-q", g.Remote("app"), "HEAD:refs/heads/smolvm/issue-1-crash"},
	} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	page := g.CreateIssue(t, "app", "Crash on empty input", "steps...")
	closedPage := g.CreateIssue(t, "app", "old", "")
	g.Call(t, http.MethodPatch, "/repos/smolvm/app/issues/2", map[string]any{"state": "closed"}, nil)
	g.Call(t, http.MethodPut, "/repos/smolvm/app/issues/2/lock", map[string]any{}, nil)

	t.Setenv("SMOLVM_FORGE", "gitea") // 127.0.0.1 does not say which forge it is
	f, n, err := Parse(page, g.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	is, err := f.Issue(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	want := Issue{Number: 1, Title: "Crash on empty input", Body: "steps...", State: "open", URL: page}
	if is != want {
		t.Fatalf("issue %+v, want %+v", is, want)
	}
	f2, n2, err := Parse(closedPage, g.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if is, err := f2.Issue(ctx, n2); err != nil || is.State != "closed" || !is.Locked {
		t.Fatalf("closed, locked issue %+v %v", is, err)
	}
	if _, err := f.Issue(ctx, 99); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing issue: %v", err)
	}
	if _, err := NewGitea(g.API(), "smolvm", "app", "not-a-token", nil).Issue(ctx, 1); !errors.Is(err, errdefs.ErrDenied) {
		t.Fatalf("bad token: %v", err)
	}

	pr := PullRequest{Head: "smolvm/issue-1-crash", Base: "main", Title: "Fix #1: Crash on empty input", Body: "Fixes #1", Draft: true}
	url, err := f.OpenPR(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	prs := g.PRs(t, "app")
	if len(prs) != 1 || prs[0].URL != url || !prs[0].Draft || prs[0].Title != "WIP: "+pr.Title || prs[0].Head != pr.Head || prs[0].Base != "main" || prs[0].Body != "Fixes #1" {
		t.Fatalf("opened %q; Gitea has %+v", url, prs)
	}
	if !strings.HasPrefix(url, g.URL+"/smolvm/app/pulls/") {
		t.Fatalf("url %s", url)
	}
	// Gitea numbers pull requests with issues: #3 after two issues.
	if _, err := f.Issue(ctx, prs[0].Number); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "is a pull request") {
		t.Fatalf("PR #%d as issue: %v", prs[0].Number, err)
	}
	if _, err := f.OpenPR(ctx, pr); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second PR: %v", err)
	}
	pr.Head = "no-such-branch"
	if _, err := f.OpenPR(ctx, pr); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `ref "no-such-branch" does not exist`) {
		t.Fatalf("PR from a missing branch: %v", err)
	}
}
