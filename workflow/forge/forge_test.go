package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/workflow/forge/forgetest"
)

var ctx = context.Background()

// TestGitHub: the issue request is GET /repos/{o}/{r}/issues/{n} with
// GitHub's headers; open, closed and locked issues read as such; a pull
// request is not an issue; a draft PR is POST /repos/{o}/{r}/pulls with
// exactly the documented body.
func TestGitHub(t *testing.T) {
	srv := forgetest.NewServer(t)
	srv.Token = "ghp_secret"
	srv.GitHubIssue("acme", "app", forgetest.Issue{Number: 12, Title: "Crash on empty input", Body: "steps..."})
	srv.GitHubIssue("acme", "app", forgetest.Issue{Number: 13, Title: "old", State: "closed", Locked: true})
	srv.GitHubIssue("acme", "app", forgetest.Issue{Number: 14, Title: "a PR", PullRequest: true})
	gh := NewGitHub(srv.URL, "acme", "app", "ghp_secret", nil)

	is, err := gh.Issue(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	want := Issue{Number: 12, Title: "Crash on empty input", Body: "steps...", State: "open", URL: srv.URL + "/acme/app/issues/12"}
	if is != want {
		t.Fatalf("issue %+v, want %+v", is, want)
	}
	req := srv.Requests()[0]
	if req.Method != "GET" || req.Path != "/repos/acme/app/issues/12" {
		t.Fatalf("%s %s", req.Method, req.Path)
	}
	for k, v := range map[string]string{"Authorization": "Bearer ghp_secret", "Accept": "application/vnd.github+json",
		"X-Github-Api-Version": GitHubAPIVersion, "User-Agent": "smolvm"} {
		if got := req.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}

	if is, err := gh.Issue(ctx, 13); err != nil || is.State != "closed" || !is.Locked {
		t.Fatalf("closed issue %+v %v", is, err)
	}
	if _, err := gh.Issue(ctx, 14); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "pull request") {
		t.Fatalf("PR as issue: %v", err)
	}
	if _, err := gh.Issue(ctx, 99); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "Not Found") {
		t.Fatalf("missing issue: %v", err)
	}
	if _, err := NewGitHub(srv.URL, "acme", "app", "wrong", nil).Issue(ctx, 12); !errors.Is(err, errdefs.ErrDenied) || !strings.Contains(err.Error(), "Bad credentials") {
		t.Fatalf("bad token: %v", err)
	}

	pr := PullRequest{Head: "smolvm/issue-12-crash-on-empty-input", Base: "main", Title: "Fix crash on empty input", Body: "Fixes #12", Draft: true}
	url, err := gh.OpenPR(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if url != srv.URL+"/acme/app/pull/1" {
		t.Fatalf("url %s", url)
	}
	reqs := srv.Requests()
	post := reqs[len(reqs)-1]
	wantBody := map[string]any{"title": pr.Title, "head": pr.Head, "base": "main", "body": "Fixes #12", "draft": true}
	if post.Method != "POST" || post.Path != "/repos/acme/app/pulls" || !reflect.DeepEqual(post.Body, wantBody) || post.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s %v %v", post.Method, post.Path, post.Body, post.Header)
	}
	if prs := srv.PRs(); len(prs) != 1 || !prs[0].Draft {
		t.Fatalf("PRs %+v", prs)
	}
	_, err = gh.OpenPR(ctx, pr)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "A pull request already exists for acme:"+pr.Head) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("second PR: %v", err)
	}
	n := len(srv.Requests())
	if _, err := gh.OpenPR(ctx, PullRequest{Head: "x", Title: "no base"}); !errors.Is(err, errdefs.ErrInvalid) || len(srv.Requests()) != n {
		t.Fatalf("PR without base: %v (sent: %v)", err, len(srv.Requests()) != n)
	}
}

// TestGitLab: the project's path is one URL-encoded segment, the token is
// PRIVATE-TOKEN, "opened" reads as open, discussion_locked as locked, and
// a draft merge request is titled "Draft: ...".
func TestGitLab(t *testing.T) {
	srv := forgetest.NewServer(t)
	srv.Token = "glpat-secret"
	srv.GitLabIssue("group/sub/proj", forgetest.Issue{Number: 3, Title: "Slow start", Body: "it takes 10 s"})
	srv.GitLabIssue("group/sub/proj", forgetest.Issue{Number: 4, Title: "done", State: "closed", Locked: true})
	gl := NewGitLab(srv.GitLabAPI(), "group/sub/proj", "glpat-secret", nil)

	is, err := gl.Issue(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := Issue{Number: 3, Title: "Slow start", Body: "it takes 10 s", State: "open", URL: srv.URL + "/group/sub/proj/-/issues/3"}
	if is != want {
		t.Fatalf("issue %+v, want %+v", is, want)
	}
	req := srv.Requests()[0]
	if req.Method != "GET" || req.Path != "/api/v4/projects/group%2Fsub%2Fproj/issues/3" || req.Header.Get("PRIVATE-TOKEN") != "glpat-secret" || req.Header.Get("Authorization") != "" {
		t.Fatalf("%s %s %v", req.Method, req.Path, req.Header)
	}
	if is, err := gl.Issue(ctx, 4); err != nil || is.State != "closed" || !is.Locked {
		t.Fatalf("closed issue %+v %v", is, err)
	}
	if _, err := gl.Issue(ctx, 5); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing issue: %v", err)
	}
	if _, err := NewGitLab(srv.GitLabAPI(), "group/sub/proj", "", nil).Issue(ctx, 3); !errors.Is(err, errdefs.ErrDenied) {
		t.Fatalf("no token: %v", err)
	}

	pr := PullRequest{Head: "smolvm/issue-3-slow-start", Base: "main", Title: "Start faster", Body: "Closes #3", Draft: true}
	url, err := gl.OpenPR(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if url != srv.URL+"/group/sub/proj/-/merge_requests/1" {
		t.Fatalf("url %s", url)
	}
	reqs := srv.Requests()
	post := reqs[len(reqs)-1]
	wantBody := map[string]any{"source_branch": pr.Head, "target_branch": "main", "title": "Draft: Start faster", "description": "Closes #3"}
	if post.Method != "POST" || post.Path != "/api/v4/projects/group%2Fsub%2Fproj/merge_requests" || !reflect.DeepEqual(post.Body, wantBody) {
		t.Fatalf("%s %s %v", post.Method, post.Path, post.Body)
	}
	if prs := srv.PRs(); len(prs) != 1 || !prs[0].Draft {
		t.Fatalf("MRs %+v", prs)
	}
	_, err = gl.OpenPR(ctx, pr)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "Another open merge request already exists") {
		t.Fatalf("second MR: %v", err)
	}
	pr.Head, pr.Draft = "other", false
	if _, err := gl.OpenPR(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if prs := srv.PRs(); prs[1].Title != "Start faster" || prs[1].Draft {
		t.Fatalf("ready MR %+v", prs[1])
	}
}

// TestGitea: Gitea's API is under /api/v1 with GitHub's repository shape;
// the token is "Authorization: token", is_locked reads as locked, a pull
// request is not an issue, a draft is titled "WIP: ", and a second PR from
// the same branch is Gitea's 409, a conflict.
func TestGitea(t *testing.T) {
	srv := forgetest.NewServer(t)
	srv.Token = "gitea-secret"
	srv.GiteaIssue("acme", "app", forgetest.Issue{Number: 5, Title: "Panics on nil", Body: "see log"})
	srv.GiteaIssue("acme", "app", forgetest.Issue{Number: 6, Title: "old", State: "closed", Locked: true})
	srv.GiteaIssue("acme", "app", forgetest.Issue{Number: 7, Title: "a PR", PullRequest: true})
	gt := NewGitea(srv.GiteaAPI(), "acme", "app", "gitea-secret", nil)

	is, err := gt.Issue(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := Issue{Number: 5, Title: "Panics on nil", Body: "see log", State: "open", URL: srv.URL + "/acme/app/issues/5"}
	if is != want {
		t.Fatalf("issue %+v, want %+v", is, want)
	}
	req := srv.Requests()[0]
	if req.Method != "GET" || req.Path != "/api/v1/repos/acme/app/issues/5" || req.Header.Get("Authorization") != "token gitea-secret" || req.Header.Get("User-Agent") != "smolvm" {
		t.Fatalf("%s %s %v", req.Method, req.Path, req.Header)
	}
	if is, err := gt.Issue(ctx, 6); err != nil || is.State != "closed" || !is.Locked {
		t.Fatalf("closed issue %+v %v", is, err)
	}
	if _, err := gt.Issue(ctx, 7); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "gitea: acme/app#7 is a pull request") {
		t.Fatalf("PR as issue: %v", err)
	}
	if _, err := gt.Issue(ctx, 8); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing issue: %v", err)
	}
	if _, err := NewGitea(srv.GiteaAPI(), "acme", "app", "", nil).Issue(ctx, 5); !errors.Is(err, errdefs.ErrDenied) {
		t.Fatalf("no token: %v", err)
	}

	pr := PullRequest{Head: "smolvm/issue-5-panics-on-nil", Base: "main", Title: "Fix #5: Panics on nil", Body: "Fixes #5", Draft: true}
	url, err := gt.OpenPR(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	if url != srv.URL+"/acme/app/pulls/1" {
		t.Fatalf("url %s", url)
	}
	reqs := srv.Requests()
	post := reqs[len(reqs)-1]
	wantBody := map[string]any{"head": pr.Head, "base": "main", "title": "WIP: Fix #5: Panics on nil", "body": "Fixes #5"}
	if post.Method != "POST" || post.Path != "/api/v1/repos/acme/app/pulls" || !reflect.DeepEqual(post.Body, wantBody) {
		t.Fatalf("%s %s %v", post.Method, post.Path, post.Body)
	}
	if prs := srv.PRs(); len(prs) != 1 || !prs[0].Draft || prs[0].Forge != "gitea" {
		t.Fatalf("PRs %+v", prs)
	}
	if _, err := gt.OpenPR(ctx, pr); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "pull request already exists") {
		t.Fatalf("second PR: %v", err)
	}
	pr.Head, pr.Draft, pr.Title = "other", true, "wip: already marked"
	if _, err := gt.OpenPR(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if prs := srv.PRs(); prs[1].Title != "wip: already marked" || !prs[1].Draft {
		t.Fatalf("marked PR %+v", prs[1])
	}
}

// TestErrors: error answers (over HTTP) map to classes and keep the
// forge's message; a rate limit is unavailable, not denied.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		class  error
		msg    string
	}{
		{422, `{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"base","code":"invalid"}]}`, errdefs.ErrInvalid, "Validation Failed: PullRequest base invalid"},
		{422, `{"message":"Validation Failed","errors":[{"message":"A pull request already exists for a:b."}]}`, errdefs.ErrConflict, "already exists"},
		{400, `{"message":{"title":["is too long"]}}`, errdefs.ErrInvalid, "title is too long"},
		{403, `{"message":"Resource not accessible by integration"}`, errdefs.ErrDenied, "not accessible"},
		{503, `<html>down</html>`, errdefs.ErrUnavailable, "<html>down</html>"},
		{403, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`, errdefs.ErrUnavailable, "(retry after 60 s)"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		_, err := NewGitHub(srv.URL, "a", "b", "", nil).OpenPR(ctx, PullRequest{Head: "h", Base: "main", Title: "t"})
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.Status != c.status || e.Path != "/repos/a/b/pulls" {
			t.Fatalf("%d: %v", c.status, err)
		}
		if !errors.Is(e, c.class) || !strings.Contains(e.Error(), c.msg) {
			t.Errorf("%d %s: %v (class %v)", c.status, c.body, e, errdefs.Class(e))
		}
	}
}

// TestParse derives the forge, its API and the number from an issue's
// address, honours the API overrides, and refuses what is not an issue URL.
func TestParse(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		url, api, project string
		n                 int
	}{
		{"https://github.com/acme/app/issues/12", "https://api.github.com", "acme/app", 12},
		{"https://ghe.corp/acme/app/issues/7/", "https://ghe.corp/api/v3", "acme/app", 7},
		{"https://gitlab.com/group/sub/proj/-/issues/3", "https://gitlab.com/api/v4", "group/sub/proj", 3},
		{"https://code.corp:8443/team/proj/-/issues/9", "https://code.corp:8443/api/v4", "team/proj", 9},
		{"https://gitlab.com/group/proj/issues/4", "https://gitlab.com/api/v4", "group/proj", 4},
		{"https://codeberg.org/acme/app/issues/5", "https://codeberg.org/api/v1", "acme/app", 5},
		{"http://gitea.corp:3000/acme/app/issues/6", "http://gitea.corp:3000/api/v1", "acme/app", 6},
		{"https://forgejo.corp/acme/app/issues/7", "https://forgejo.corp/api/v1", "acme/app", 7},
	} {
		f, n, err := parse(c.url, "tok", nil, getenv)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		api, project := "", ""
		switch f := f.(type) {
		case *gitHub:
			api, project = f.api, f.owner+"/"+f.repo
		case *gitLab:
			api, project = f.api, f.project
		case *gitea:
			api, project = f.api, f.owner+"/"+f.repo
		}
		if n != c.n || api != c.api || project != c.project {
			t.Errorf("%s: %d %s %s", c.url, n, api, project)
		}
	}
	for _, bad := range []string{"", "github.com/a/b/issues/1", "https://github.com/a/issues/1", "https://github.com/a/b/pull/1",
		"https://github.com/a/b/issues/x", "https://github.com/a/b/issues/0", "https://gitlab.com/-/issues/1", "ftp://github.com/a/b/issues/1"} {
		if _, _, err := parse(bad, "", nil, getenv); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}

	srv := forgetest.NewServer(t)
	srv.GitHubIssue("acme", "app", forgetest.Issue{Number: 12, Title: "via override"})
	srv.GitLabIssue("g/p", forgetest.Issue{Number: 2, Title: "via override too"})
	srv.GiteaIssue("o", "r", forgetest.Issue{Number: 3, Title: "via override three"})
	env["SMOLVM_GITHUB_API"], env["SMOLVM_GITLAB_API"], env["SMOLVM_GITEA_API"] = srv.URL, srv.GitLabAPI(), srv.GiteaAPI()
	for _, u := range []string{"https://github.com/acme/app/issues/12", "https://gitlab.com/g/p/-/issues/2", "https://codeberg.org/o/r/issues/3"} {
		f, n, err := parse(u, "", nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if is, err := f.Issue(ctx, n); err != nil || !strings.HasPrefix(is.Title, "via override") {
			t.Fatalf("%s: %+v %v", u, is, err)
		}
	}

	// SMOLVM_FORGE names the forge of a host that does not say: a
	// self-hosted Gitea on a plain name or address.
	for k, want := range map[string]string{"gitea": "*forge.gitea", "forgejo": "*forge.gitea", "gitlab": "*forge.gitLab", "github": "*forge.gitHub"} {
		env["SMOLVM_FORGE"] = k
		f, _, err := parse("http://127.0.0.1:3000/o/r/issues/1", "", nil, getenv)
		if got := fmt.Sprintf("%T", f); err != nil || got != want {
			t.Errorf("SMOLVM_FORGE=%s: %s %v", k, got, err)
		}
	}
	env["SMOLVM_FORGE"] = "bitbucket"
	if _, _, err := parse("http://127.0.0.1:3000/o/r/issues/1", "", nil, getenv); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "SMOLVM_FORGE") {
		t.Errorf("SMOLVM_FORGE=bitbucket: %v", err)
	}
}

func TestTokenFromEnv(t *testing.T) {
	env := map[string]string{"GITHUB_TOKEN": "gh", "GITLAB_TOKEN": "gl"}
	getenv := func(k string) string { return env[k] }
	if a, b := TokenFromEnv("https://github.com/a/b/issues/1", getenv), TokenFromEnv("https://x.corp/g/p/-/issues/1", getenv); a != "gh" || b != "gl" {
		t.Fatalf("%q %q", a, b)
	}
	if got := TokenFromEnv("https://codeberg.org/a/b/issues/1", getenv); got != "" {
		t.Fatalf("gitea without GITEA_TOKEN: %q", got)
	}
	env["FORGEJO_TOKEN"] = "fj"
	if got := TokenFromEnv("https://codeberg.org/a/b/issues/1", getenv); got != "fj" {
		t.Fatalf("forgejo: %q", got)
	}
	env["GITEA_TOKEN"] = "gt"
	if got := TokenFromEnv("https://codeberg.org/a/b/issues/1", getenv); got != "gt" {
		t.Fatalf("gitea: %q", got)
	}
	env["SMOLVM_FORGE_TOKEN"] = "mine"
	if got := TokenFromEnv("https://github.com/a/b/issues/1", getenv); got != "mine" {
		t.Fatalf("%q", got)
	}
}
