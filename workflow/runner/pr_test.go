package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/workflow/forge"
	"smolvm.dev/smolvm/workflow/forge/forgetest"
	"smolvm.dev/smolvm/workflow/trust"
)

func gate(t *testing.T, st *store.Store, repo, policy string) *trust.Gate {
	t.Helper()
	p, err := trust.Parse(repo, "policy.toml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := trust.OpenLedger(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return &trust.Gate{Policy: p, Ledger: l}
}

// resolve runs a scripted agent that fixes jsRepo's calc.js for is, and
// makes the run's PR; the run's scratch repositories stay in runs.
func resolve(t *testing.T, rn *Runner, repo string, is forge.Issue) (runs string, run *Run, pr *PR) {
	t.Helper()
	runs = t.TempDir()
	run = fix(t, rn, repo, &script{steps: []func(context.Context, Step) error{write("calc.js", fixedCalc)}},
		func(o *Options) { o.Task = Task(is); o.RunsDir = runs })
	if run.State != Resolved {
		t.Fatalf("run = %+v", run)
	}
	pr, err := rn.MakePR(context.Background(), runs, run.ID, is, "main")
	if err != nil {
		t.Fatal(err)
	}
	return runs, run, pr
}

func TestIssueToPR(t *testing.T) {
	fg := forgetest.NewServer(t)
	t.Setenv("SMOLVM_GITHUB_API", fg.URL)
	fg.GitHubIssue("o", "r", forgetest.Issue{Number: 12, Title: "add() subtracts; mul() adds", Body: "calc.js is wrong."})
	fg.GitHubIssue("o", "r", forgetest.Issue{Number: 13, Title: "old", State: "closed"})
	fg.GitHubIssue("o", "r", forgetest.Issue{Number: 14, Title: "locked", Locked: true})
	fg.GitHubIssue("o", "r", forgetest.Issue{Number: 15, Title: "done already"})
	ctx := context.Background()

	rn := newRunner(t)
	repo := gitRepo(t, jsRepo)
	exec.Command("git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "handle it (#15)").Run()

	is, f, err := ReadIssue(ctx, "https://github.com/o/r/issues/12", "tok", nil)
	if err != nil || f == nil || is.Number != 12 {
		t.Fatalf("read issue: %+v %v", is, err)
	}
	if err := CheckIssue(ctx, repo, is); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"13", "14", "15"} {
		other, _, err := ReadIssue(ctx, "https://github.com/o/r/issues/"+n, "tok", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckIssue(ctx, repo, other); !errors.Is(err, ErrSkipped) {
			t.Errorf("issue %s: %v, want skipped", n, err)
		}
	}

	runs, run, pr := resolve(t, rn, repo, is)
	if pr.Head != "smolvm/issue-12-add-subtracts-mul-adds" || !pr.Draft || pr.Title != "Fix #12: add() subtracts; mul() adds" {
		t.Fatalf("pr = %+v", pr.PullRequest)
	}
	for _, want := range []string{"## Problem", "calc.js is wrong", "## Change", "calc.js | 4", "## Test evidence", "3 passed, 0 failed", "iterations: 1", "tokens: 100 in", "flaky tests seen: none",
		"## Review evidence", "**proven**", "fail-to-pass (2): add, mul", "pass-to-pass (1): zero", "| `calc.js` `@@ -1,2 +1,2 @@` | add, mul |",
		"Diff coverage (node-v8): 2 of 2 changed lines executed"} {
		if !strings.Contains(pr.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, pr.Body)
		}
	}
	dry := filepath.Join(t.TempDir(), "pr")
	if err := pr.WriteFiles(dry); err != nil {
		t.Fatal(err)
	}
	if d, _ := os.ReadFile(filepath.Join(dry, "pr.diff")); !strings.Contains(string(d), "+exports.mul = (a, b) => a * b;") {
		t.Errorf("pr.diff = %s", d)
	}

	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The repository's remote: a real bare repository.
	remote := filepath.Join(t.TempDir(), "remote.git")
	for _, args := range [][]string{{"init", "-q", "--bare", remote}, {"-C", repo, "remote", "add", "origin", remote}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	onRemote := func() string {
		out, _ := exec.Command("git", "--git-dir", remote, "for-each-ref", "--format=%(refname) %(objectname)").Output()
		return strings.TrimSpace(string(out))
	}
	// A policy that denies open-pr makes no branch and sends nothing;
	// one that allows the PR but denies the push opens no PR.
	for _, policy := range []string{"[git]\ncommit = \"allow\"\npush = \"allow\"\npr = \"deny\"\n", "[git]\ncommit = \"allow\"\npush = \"deny\"\npr = \"allow\"\n"} {
		if err := rn.Publish(ctx, gate(t, st, repo, policy), f, runs, run.ID, "origin", pr); !errors.Is(err, trust.ErrDenied) {
			t.Fatalf("publish under %q: %v", policy, err)
		}
		if len(fg.PRs()) != 0 || onRemote() != "" {
			t.Fatalf("under %q: PRs %+v, remote %q", policy, fg.PRs(), onRemote())
		}
	}
	allow := gate(t, st, repo, "[git]\ncommit = \"allow\"\npush = \"allow\"\npr = \"allow\"\n")
	if err := rn.Publish(ctx, allow, f, runs, run.ID, "origin", pr); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", repo, "show", "--format=%s%n%b", "--stat", pr.Head).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Fixes #12") || !strings.Contains(string(out), "calc.js") {
		t.Fatalf("branch: %v\n%s", err, out)
	}
	if st, _ := exec.Command("git", "-C", repo, "status", "--porcelain").Output(); len(st) != 0 {
		t.Errorf("the user's work tree changed: %s", st)
	}
	if got := onRemote(); got != "refs/heads/"+pr.Head+" "+pr.Commit {
		t.Fatalf("remote has %q, want the branch at %s", got, pr.Commit)
	}
	prs := fg.PRs()
	if len(prs) != 1 || prs[0].Head != pr.Head || prs[0].Base != "main" || !prs[0].Draft || prs[0].Repo != "o/r" || pr.URL == "" {
		t.Fatalf("opened %+v, url %q", prs, pr.URL)
	}
	var sawAuth bool
	for _, r := range fg.Requests() {
		if r.Method == "POST" && r.Path == "/repos/o/r/pulls" {
			sawAuth = r.Header.Get("Authorization") == "Bearer tok"
		}
	}
	if !sawAuth {
		t.Errorf("no authorized POST /repos/o/r/pulls in %+v", fg.Requests())
	}
}

// TestIssueToPRGitea goes from an issue to a draft pull request on a real
// Gitea (forgetest.NewGitea): the issue is read through the address Gitea
// gives it, the run resolves it in a sandbox, and Publish creates the
// branch, pushes it over HTTP and opens the PR, which Gitea then lists as
// a draft on that branch at the run's commit.
func TestIssueToPRGitea(t *testing.T) {
	g := forgetest.NewGitea(t)
	ctx := context.Background()
	g.CreateRepo(t, "calc")
	repo := gitRepo(t, jsRepo)
	if out, err := exec.Command("git", "-C", repo, "push", "-q", g.Remote("calc"), "HEAD:refs/heads/main").CombinedOutput(); err != nil {
		t.Fatalf("push main: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", repo, "remote", "add", "origin", g.Remote("calc")).CombinedOutput(); err != nil {
		t.Fatalf("remote: %v\n%s", err, out)
	}
	page := g.CreateIssue(t, "calc", "add() subtracts; mul() adds", "calc.js is wrong.")

	t.Setenv("SMOLVM_FORGE", "gitea") // 127.0.0.1 does not say which forge it is
	is, f, err := ReadIssue(ctx, page, g.Token, nil)
	if err != nil || f == nil || is.Number != 1 || is.State != "open" {
		t.Fatalf("read issue: %+v %v", is, err)
	}
	if err := CheckIssue(ctx, repo, is); err != nil {
		t.Fatal(err)
	}
	rn := newRunner(t)
	runs, run, pr := resolve(t, rn, repo, is)
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	allow := gate(t, st, repo, "[git]\ncommit = \"allow\"\npush = \"allow\"\npr = \"allow\"\n")
	if err := rn.Publish(ctx, allow, f, runs, run.ID, "origin", pr); err != nil {
		t.Fatal(err)
	}
	prs := g.PRs(t, "calc")
	if len(prs) != 1 || prs[0].URL != pr.URL || !prs[0].Draft || prs[0].Head != pr.Head || prs[0].Base != "main" ||
		prs[0].Title != "WIP: Fix #1: add() subtracts; mul() adds" || !strings.Contains(prs[0].Body, "## Test evidence") {
		t.Fatalf("opened %q; Gitea has %+v", pr.URL, prs)
	}
	out, err := exec.Command("git", "ls-remote", g.Remote("calc"), "refs/heads/"+pr.Head).Output()
	if err != nil || !strings.HasPrefix(string(out), pr.Commit) {
		t.Fatalf("ls-remote: %v %q, want %s", err, out, pr.Commit)
	}
}
