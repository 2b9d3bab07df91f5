package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"smolvm.dev/smolvm/errdefs"
)

type gitLab struct {
	client
	project string
}

// NewGitLab returns the project (its numeric ID or its full path,
// "group/sub/project") on the GitLab API at apiBase
// (https://gitlab.com/api/v4). The token goes in PRIVATE-TOKEN.
func NewGitLab(apiBase, project, token string, hc *http.Client) Forge {
	h := http.Header{}
	h.Set("Accept", "application/json")
	if token != "" {
		h.Set("PRIVATE-TOKEN", token)
	}
	return &gitLab{client: newClient("gitlab", apiBase, hc, h), project: project}
}

// path is under /projects/{id}, the project's path URL-encoded as one
// segment (group%2Fproject), as GitLab wants it.
func (g *gitLab) path(rest string) string {
	return "/projects/" + url.PathEscape(g.project) + rest
}

// Issue reads GET /projects/{id}/issues/{iid}.
func (g *gitLab) Issue(ctx context.Context, n int) (Issue, error) {
	if err := checkNumber(g.name, n); err != nil {
		return Issue{}, err
	}
	var is struct {
		IID              int     `json:"iid"`
		Title            string  `json:"title"`
		Description      *string `json:"description"`
		State            string  `json:"state"`
		WebURL           string  `json:"web_url"`
		DiscussionLocked *bool   `json:"discussion_locked"`
	}
	if err := g.do(ctx, http.MethodGet, g.path(fmt.Sprintf("/issues/%d", n)), nil, &is); err != nil {
		return Issue{}, err
	}
	out := Issue{Number: is.IID, Title: is.Title, State: is.State, URL: is.WebURL}
	if out.State == "opened" {
		out.State = "open"
	}
	if is.Description != nil {
		out.Body = *is.Description
	}
	if is.DiscussionLocked != nil {
		out.Locked = *is.DiscussionLocked
	}
	return out, nil
}

// OpenPR sends POST /projects/{id}/merge_requests. A draft is marked by
// the "Draft: " title prefix, which every GitLab version understands.
func (g *gitLab) OpenPR(ctx context.Context, pr PullRequest) (string, error) {
	if err := checkPR(g.name, pr); err != nil {
		return "", err
	}
	in := struct {
		SourceBranch string `json:"source_branch"`
		TargetBranch string `json:"target_branch"`
		Title        string `json:"title"`
		Description  string `json:"description"`
	}{pr.Head, pr.Base, draftTitle(pr, "Draft: "), pr.Body}
	var out struct {
		WebURL string `json:"web_url"`
	}
	if err := g.do(ctx, http.MethodPost, g.path("/merge_requests"), in, &out); err != nil {
		return "", err
	}
	if out.WebURL == "" {
		return "", errdefs.New(errdefs.ErrInvalid, "gitlab: the new merge request's answer has no web_url")
	}
	return out.WebURL, nil
}
