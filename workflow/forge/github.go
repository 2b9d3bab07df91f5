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

type gitHub struct{ ownerRepo }

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
	return &gitHub{ownerRepo{client: newClient("github", apiBase, hc, h), owner: owner, repo: repo}}
}

// OpenPR sends POST /repos/{owner}/{repo}/pulls.
func (g *gitHub) OpenPR(ctx context.Context, pr PullRequest) (string, error) {
	in := struct {
		Title string `json:"title"`
		Head  string `json:"head"`
		Base  string `json:"base"`
		Body  string `json:"body"`
		Draft bool   `json:"draft"`
	}{pr.Title, pr.Head, pr.Base, pr.Body, pr.Draft}
	return g.openPR(ctx, pr, in)
}

// ownerRepo is a repository named /repos/{owner}/{repo} whose issues and
// pull requests have GitHub's shape: GitHub's, and Gitea's, which copied it.
type ownerRepo struct {
	client
	owner, repo string
}

func (g *ownerRepo) path(rest string) string {
	return "/repos/" + url.PathEscape(g.owner) + "/" + url.PathEscape(g.repo) + rest
}

// Issue reads GET /repos/{owner}/{repo}/issues/{n}. Both forges serve pull
// requests there too (with a pull_request field): those are refused.
func (g *ownerRepo) Issue(ctx context.Context, n int) (Issue, error) {
	if err := checkNumber(g.name, n); err != nil {
		return Issue{}, err
	}
	var is struct {
		Number      int            `json:"number"`
		Title       string         `json:"title"`
		Body        *string        `json:"body"`
		State       string         `json:"state"`
		HTMLURL     string         `json:"html_url"`
		Locked      bool           `json:"locked"`    // GitHub's name
		IsLocked    bool           `json:"is_locked"` // Gitea's
		PullRequest map[string]any `json:"pull_request"`
	}
	if err := g.do(ctx, http.MethodGet, g.path(fmt.Sprintf("/issues/%d", n)), nil, &is); err != nil {
		return Issue{}, err
	}
	if is.PullRequest != nil {
		return Issue{}, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: %s/%s#%d is a pull request, not an issue", g.name, g.owner, g.repo, n))
	}
	out := Issue{Number: is.Number, Title: is.Title, State: is.State, URL: is.HTMLURL, Locked: is.Locked || is.IsLocked}
	if is.Body != nil {
		out.Body = *is.Body
	}
	return out, nil
}

// openPR checks pr and sends in, the forge's body for it, as POST
// /repos/{owner}/{repo}/pulls; it returns the new PR's html_url.
func (g *ownerRepo) openPR(ctx context.Context, pr PullRequest, in any) (string, error) {
	if err := checkPR(g.name, pr); err != nil {
		return "", err
	}
	var out struct {
		HTMLURL string `json:"html_url"`
	}
	if err := g.do(ctx, http.MethodPost, g.path("/pulls"), in, &out); err != nil {
		return "", err
	}
	if out.HTMLURL == "" {
		return "", errdefs.New(errdefs.ErrInvalid, g.name+": the new pull request's answer has no html_url")
	}
	return out.HTMLURL, nil
}
