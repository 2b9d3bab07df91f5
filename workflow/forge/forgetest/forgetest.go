// Package forgetest is a local GitHub (REST v3), GitLab (REST v4) and
// Gitea (REST v1) server for tests: it serves the issues it is given, opens
// pull and merge requests the way the documented APIs do, and records every
// request. Gitea (a real server built from its Go module) starts with
// NewGitea.
package forgetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Issue is an issue to serve. State is "open" or "closed" (GitLab's
// answer says "opened" for open).
type Issue struct {
	Number      int
	Title, Body string
	State       string // default "open"
	Locked      bool
	PullRequest bool // GitHub: a pull request, which GitHub serves as an issue too
}

// Request is one request as it arrived.
type Request struct {
	Method string
	Path   string // escaped, as sent: /api/v4/projects/g%2Fp/issues/3
	Header http.Header
	Body   map[string]any // the JSON body, nil without one
}

// PR is a pull or merge request the server opened, in its forge's words.
type PR struct {
	Forge       string // "github", "gitlab" or "gitea"
	Repo        string // owner/repo, or the GitLab project path
	Number      int
	Head, Base  string
	Title, Body string
	Draft       bool
	URL         string
}

// Server is a running fake forge. GitHub's API is at URL, GitLab's at
// URL+"/api/v4", Gitea's at URL+"/api/v1"; web pages are under URL too.
type Server struct {
	URL string
	// Token, if set, is required: as "Authorization: Bearer" on GitHub
	// routes, PRIVATE-TOKEN on GitLab routes and "Authorization: token"
	// on Gitea routes.
	Token string

	srv    *httptest.Server
	mu     sync.Mutex
	issues map[string]Issue // "github o/r#n", "gitlab g/p#n", "gitea o/r#n"
	prs    []PR
	reqs   []Request
}

// NewServer starts a server; it closes on t.Cleanup.
func NewServer(t testing.TB) *Server {
	s := &Server{issues: map[string]Issue{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// GitLabAPI is the GitLab API's base URL.
func (s *Server) GitLabAPI() string { return s.URL + "/api/v4" }

// GitHubIssue serves is as owner/repo's issue is.Number.
func (s *Server) GitHubIssue(owner, repo string, is Issue) {
	s.mu.Lock()
	s.issues[fmt.Sprintf("github %s/%s#%d", owner, repo, is.Number)] = is
	s.mu.Unlock()
}

// GiteaAPI is the Gitea API's base URL.
func (s *Server) GiteaAPI() string { return s.URL + "/api/v1" }

// GiteaIssue serves is as owner/repo's issue is.Number on Gitea.
func (s *Server) GiteaIssue(owner, repo string, is Issue) {
	s.mu.Lock()
	s.issues[fmt.Sprintf("gitea %s/%s#%d", owner, repo, is.Number)] = is
	s.mu.Unlock()
}

// GitLabIssue serves is as project's (its full path) issue is.Number.
func (s *Server) GitLabIssue(project string, is Issue) {
	s.mu.Lock()
	s.issues[fmt.Sprintf("gitlab %s#%d", project, is.Number)] = is
	s.mu.Unlock()
}

// Requests returns the requests received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// PRs returns the pull and merge requests opened, in order.
func (s *Server) PRs() []PR {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PR(nil), s.prs...)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone()}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec.Body); err != nil {
			reply(w, http.StatusBadRequest, map[string]any{"message": "Problems parsing JSON"})
			return
		}
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, rec)
	s.mu.Unlock()

	var segs []string
	for _, seg := range strings.Split(strings.Trim(rec.Path, "/"), "/") {
		u, err := url.PathUnescape(seg)
		if err != nil {
			reply(w, http.StatusBadRequest, map[string]any{"message": "bad path"})
			return
		}
		segs = append(segs, u)
	}
	switch {
	case len(segs) >= 4 && segs[0] == "repos":
		s.ownerRepo(w, r, rec, gitHub, segs[1]+"/"+segs[2], segs[3:])
	case len(segs) >= 6 && segs[0] == "api" && segs[1] == "v1" && segs[2] == "repos":
		s.ownerRepo(w, r, rec, gitea, segs[3]+"/"+segs[4], segs[5:])
	case len(segs) >= 5 && segs[0] == "api" && segs[1] == "v4" && segs[2] == "projects":
		s.gitLab(w, r, rec, segs[3], segs[4:])
	default:
		reply(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
	}
}

// flavor is how GitHub and Gitea, which share the /repos/{o}/{r} shape,
// differ.
type flavor struct {
	forge        string
	auth         string // the Authorization scheme
	locked       string // the issue's lock field
	page         string // a PR's web page: URL/{o}/{r}/{page}/{n}
	unauthorized func() map[string]any
	notFound     map[string]any
	// draft reads a new PR's draft state from its body.
	draft func(body map[string]any) bool
	// exists answers a second PR from the same head branch.
	exists func(owner, head string, p PR) (int, map[string]any)
}

var gitHub = flavor{
	forge: "github", auth: "Bearer", locked: "locked", page: "pull",
	unauthorized: func() map[string]any {
		return map[string]any{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
	},
	notFound: map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"},
	draft:    func(body map[string]any) bool { d, _ := body["draft"].(bool); return d },
	exists: func(owner, head string, _ PR) (int, map[string]any) {
		return http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed", "errors": []any{
			map[string]any{"resource": "PullRequest", "code": "custom", "message": fmt.Sprintf("A pull request already exists for %s:%s.", owner, head)}}}
	},
}

// gitea: no draft field (a "WIP:" or "[WIP]" title is one), 409 for a
// second PR, {"message", "url"} errors.
var gitea = flavor{
	forge: "gitea", auth: "token", locked: "is_locked", page: "pulls",
	unauthorized: func() map[string]any {
		return map[string]any{"message": "user does not exist", "url": "https://gitea.example/api/swagger"}
	},
	notFound: map[string]any{"message": "The target couldn't be found.", "url": "https://gitea.example/api/swagger", "errors": []any{}},
	draft: func(body map[string]any) bool {
		t := strings.ToUpper(str(body, "title"))
		return strings.HasPrefix(t, "WIP:") || strings.HasPrefix(t, "[WIP]")
	},
	exists: func(_, head string, p PR) (int, map[string]any) {
		return http.StatusConflict, map[string]any{"message": fmt.Sprintf("pull request already exists for these targets [id: %d, head_branch: %s, base_branch: %s]", p.Number, head, p.Base), "url": "https://gitea.example/api/swagger"}
	},
}

// ownerRepo serves GET /repos/{o}/{r}/issues/{n} and POST
// /repos/{o}/{r}/pulls in f's flavour.
func (s *Server) ownerRepo(w http.ResponseWriter, r *http.Request, rec Request, f flavor, repo string, rest []string) {
	if s.Token != "" && r.Header.Get("Authorization") != f.auth+" "+s.Token {
		reply(w, http.StatusUnauthorized, f.unauthorized())
		return
	}
	switch {
	case r.Method == http.MethodGet && len(rest) == 2 && rest[0] == "issues":
		is, n, ok := s.issue(f.forge, repo, rest[1])
		if !ok {
			reply(w, http.StatusNotFound, f.notFound)
			return
		}
		state := is.State
		if state == "" {
			state = "open"
		}
		page := fmt.Sprintf("%s/%s/issues/%d", s.URL, repo, n)
		out := map[string]any{"id": 1000 + n, "number": n, "title": is.Title, "body": is.Body, "state": state,
			f.locked: is.Locked, "html_url": page, "user": map[string]any{"login": "someone"}, "labels": []any{}}
		if is.PullRequest {
			out["html_url"] = fmt.Sprintf("%s/%s/%s/%d", s.URL, repo, f.page, n)
			out["pull_request"] = map[string]any{"url": fmt.Sprintf("%s/repos/%s/pulls/%d", s.URL, repo, n), "html_url": out["html_url"]}
		}
		reply(w, http.StatusOK, out)
	case r.Method == http.MethodPost && len(rest) == 1 && rest[0] == "pulls":
		pr := PR{Forge: f.forge, Repo: repo, Head: str(rec.Body, "head"), Base: str(rec.Body, "base"), Title: str(rec.Body, "title"),
			Body: str(rec.Body, "body"), Draft: f.draft(rec.Body)}
		var missing []any
		for _, field := range []string{"title", "head", "base"} {
			if str(rec.Body, field) == "" {
				missing = append(missing, map[string]any{"resource": "PullRequest", "field": field, "code": "missing_field"})
			}
		}
		if len(missing) > 0 {
			reply(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed", "errors": missing})
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.prs {
			if p.Forge == f.forge && p.Repo == repo && p.Head == pr.Head {
				owner, _, _ := strings.Cut(repo, "/")
				status, body := f.exists(owner, pr.Head, p)
				reply(w, status, body)
				return
			}
		}
		pr.Number = len(s.prs) + 1
		pr.URL = fmt.Sprintf("%s/%s/%s/%d", s.URL, repo, f.page, pr.Number)
		s.prs = append(s.prs, pr)
		reply(w, http.StatusCreated, map[string]any{"number": pr.Number, "html_url": pr.URL, "state": "open", "draft": pr.Draft,
			"title": pr.Title, "body": pr.Body, "head": map[string]any{"ref": pr.Head}, "base": map[string]any{"ref": pr.Base}})
	default:
		reply(w, http.StatusNotFound, f.notFound)
	}
}

// gitLab serves GET /projects/{id}/issues/{iid} and POST
// /projects/{id}/merge_requests; {id} is the project's path, URL-encoded.
func (s *Server) gitLab(w http.ResponseWriter, r *http.Request, rec Request, project string, rest []string) {
	if s.Token != "" && r.Header.Get("PRIVATE-TOKEN") != s.Token {
		reply(w, http.StatusUnauthorized, map[string]any{"message": "401 Unauthorized"})
		return
	}
	switch {
	case r.Method == http.MethodGet && len(rest) == 2 && rest[0] == "issues":
		is, n, ok := s.issue("gitlab", project, rest[1])
		if !ok {
			reply(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
			return
		}
		state := is.State
		if state == "" || state == "open" {
			state = "opened"
		}
		reply(w, http.StatusOK, map[string]any{"id": 5000 + n, "iid": n, "project_id": 42, "title": is.Title, "description": is.Body,
			"state": state, "discussion_locked": is.Locked, "web_url": fmt.Sprintf("%s/%s/-/issues/%d", s.URL, project, n)})
	case r.Method == http.MethodPost && len(rest) == 1 && rest[0] == "merge_requests":
		pr := PR{Forge: "gitlab", Repo: project, Head: str(rec.Body, "source_branch"), Base: str(rec.Body, "target_branch"), Title: str(rec.Body, "title"), Body: str(rec.Body, "description")}
		pr.Draft, _ = rec.Body["draft"].(bool)
		pr.Draft = pr.Draft || strings.HasPrefix(pr.Title, "Draft:") || strings.HasPrefix(pr.Title, "[Draft]") || strings.HasPrefix(pr.Title, "(Draft)")
		for _, f := range []string{"source_branch", "target_branch", "title"} {
			if str(rec.Body, f) == "" {
				reply(w, http.StatusBadRequest, map[string]any{"error": f + " is missing"})
				return
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.prs {
			if p.Forge == "gitlab" && p.Repo == project && p.Head == pr.Head {
				reply(w, http.StatusConflict, map[string]any{"message": []string{fmt.Sprintf("Another open merge request already exists for this source branch: !%d", p.Number)}})
				return
			}
		}
		pr.Number = len(s.prs) + 1
		pr.URL = fmt.Sprintf("%s/%s/-/merge_requests/%d", s.URL, project, pr.Number)
		s.prs = append(s.prs, pr)
		reply(w, http.StatusCreated, map[string]any{"iid": pr.Number, "web_url": pr.URL, "state": "opened", "draft": pr.Draft,
			"title": pr.Title, "description": pr.Body, "source_branch": pr.Head, "target_branch": pr.Base})
	default:
		reply(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
	}
}

// issue looks up the issue numbered num of forge's repo or project.
func (s *Server) issue(forge, repo, num string) (Issue, int, bool) {
	n, err := strconv.Atoi(num)
	if err != nil {
		return Issue{}, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	is, ok := s.issues[fmt.Sprintf("%s %s#%d", forge, repo, n)]
	return is, n, ok
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}
