package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"smolvm.dev/smolvm/errdefs"
)

// GitHubAPIVersion is the REST API version GitHub is asked for.
const GitHubAPIVersion = "2022-11-28"

type gitHub struct {
	client
	owner, repo string
}

// NewGitHub returns the repository owner/repo on the GitHub API at apiBase
// (https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise).
// An empty token sends no Authorization (public repositories, reading only).
func NewGitHub(apiBase, owner, repo, token string, hc *http.Client) Forge {
	h := http.Header{}
	h.Set("Accept", "application/vnd.github+json")
	h.Set("X-GitHub-Api-Version", GitHubAPIVersion)
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return &gitHub{client: newClient("github", apiBase, hc, h), owner: owner, repo: repo}
}

func (g *gitHub) path(rest string) string {
	return "/repos/" + url.PathEscape(g.owner) + "/" + url.PathEscape(g.repo) + rest
}

// Issue reads GET /repos/{owner}/{repo}/issues/{n}. GitHub serves pull
// requests there too (with a pull_request field): those are refused.
func (g *gitHub) Issue(ctx context.Context, n int) (Issue, error) {
	if err := checkNumber(g.name, n); err != nil {
		return Issue{}, err
	}
	var is struct {
		Number      int            `json:"number"`
		Title       string         `json:"title"`
		Body        *string        `json:"body"`
		State       string         `json:"state"`
		HTMLURL     string         `json:"html_url"`
		Locked      bool           `json:"locked"`
		PullRequest map[string]any `json:"pull_request"`
	}
	if err := g.do(ctx, http.MethodGet, g.path(fmt.Sprintf("/issues/%d", n)), nil, &is); err != nil {
		return Issue{}, err
	}
	if is.PullRequest != nil {
		return Issue{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("github: %s/%s#%d is a pull request, not an issue", g.owner, g.repo, n))
	}
	out := Issue{Number: is.Number, Title: is.Title, State: is.State, URL: is.HTMLURL, Locked: is.Locked}
	if is.Body != nil {
		out.Body = *is.Body
	}
	return out, nil
}

// OpenPR sends POST /repos/{owner}/{repo}/pulls.
func (g *gitHub) OpenPR(ctx context.Context, pr PullRequest) (string, error) {
	if err := checkPR(g.name, pr); err != nil {
		return "", err
	}
	in := struct {
		Title string `json:"title"`
		Head  string `json:"head"`
		Base  string `json:"base"`
		Body  string `json:"body"`
		Draft bool   `json:"draft"`
	}{pr.Title, pr.Head, pr.Base, pr.Body, pr.Draft}
	var out struct {
		HTMLURL string `json:"html_url"`
	}
	if err := g.do(ctx, http.MethodPost, g.path("/pulls"), in, &out); err != nil {
		return "", err
	}
	if out.HTMLURL == "" {
		return "", errdefs.New(errdefs.ErrInvalid, "github: the new pull request's answer has no html_url")
	}
	return out.HTMLURL, nil
}
