package forge

import (
	"context"
	"net/http"
)

// GiteaDraftPrefix marks a pull request as work in progress on Gitea and
// Forgejo, whose API has no draft field: "WIP:" is the first of their
// default [repository.pull-request] WORK_IN_PROGRESS_PREFIXES.
const GiteaDraftPrefix = "WIP: "

type gitea struct{ ownerRepo }

// NewGitea returns the repository owner/repo on the Gitea (or Forgejo)
// API at apiBase (https://HOST/api/v1). Its issues and pull requests have
// GitHub's shape; the token goes in "Authorization: token".
func NewGitea(apiBase, owner, repo, token string, hc *http.Client) Forge {
	h := http.Header{}
	h.Set("Accept", "application/json")
	if token != "" {
		h.Set("Authorization", "token "+token)
	}
	return &gitea{ownerRepo{client: newClient("gitea", apiBase, hc, h), owner: owner, repo: repo}}
}

// OpenPR sends POST /repos/{owner}/{repo}/pulls with {head, base, title,
// body}; a draft's title starts with GiteaDraftPrefix.
func (g *gitea) OpenPR(ctx context.Context, pr PullRequest) (string, error) {
	in := struct {
		Head  string `json:"head"`
		Base  string `json:"base"`
		Title string `json:"title"`
		Body  string `json:"body"`
	}{pr.Head, pr.Base, draftTitle(pr, GiteaDraftPrefix), pr.Body}
	return g.openPR(ctx, pr, in)
}
