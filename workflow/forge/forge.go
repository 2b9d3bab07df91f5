// Package forge reads issues from and opens pull requests on GitHub (REST
// v3), GitLab (REST v4) and Gitea or Forgejo (REST v1).
package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"smolvm.dev/smolvm/errdefs"
)

// Issue is an issue as the forge reports it. State is "open" or "closed"
// on every forge (GitLab's "opened" is "open").
type Issue struct {
	Number             int
	Title, Body, State string
	URL                string // the issue's web page
	Locked             bool   // GitHub's locked, GitLab's discussion_locked, Gitea's is_locked
}

// PullRequest is a pull (GitHub, Gitea) or merge (GitLab) request to
// open: Head is the branch with the change, Base the branch it goes into.
type PullRequest struct {
	Head, Base, Title, Body string
	Draft                   bool
}

// Forge is a repository on GitHub, GitLab or Gitea.
type Forge interface {
	Issue(ctx context.Context, number int) (Issue, error)
	// OpenPR opens pr and returns its web page.
	OpenPR(ctx context.Context, pr PullRequest) (url string, err error)
}

// Limits.
const (
	maxAnswer = 8 << 20 // an answer's body
	userAgent = "smolvm"
)

// Parse takes an issue's web address (https://github.com/o/r/issues/12,
// https://gitlab.example/g/p/-/issues/3, https://codeberg.org/o/r/issues/5)
// and returns its forge and the issue's number. An address with /-/issues/
// is GitLab's; an OWNER/REPO/issues/N one is the forge SMOLVM_FORGE names
// (github, gitlab, gitea or forgejo) or else the host's: gitlab.com and
// gitlab.* are GitLab, gitea.com, codeberg.org, gitea.* and forgejo.* are
// Gitea (Forgejo speaks its API), any other host is GitHub. The API is
// derived from the host (api.github.com for github.com, HOST/api/v3 for
// GitHub Enterprise, HOST/api/v4 for GitLab, HOST/api/v1 for Gitea) unless
// SMOLVM_GITHUB_API, SMOLVM_GITLAB_API or SMOLVM_GITEA_API names it.
func Parse(issueURL, token string, hc *http.Client) (Forge, int, error) {
	return parse(issueURL, token, hc, os.Getenv)
}

func parse(issueURL, token string, hc *http.Client, getenv func(string) string) (Forge, int, error) {
	bad := func(why string) (Forge, int, error) {
		return nil, 0, errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("issue URL %q: %s", issueURL, why))
	}
	u, err := url.Parse(issueURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return bad("want https://HOST/OWNER/REPO/issues/N or https://HOST/GROUP/PROJECT/-/issues/N")
	}
	path := strings.Trim(u.Path, "/")
	rest, num, ok := cutLast(path, "/issues/")
	if !ok {
		return bad("no /issues/N in it")
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return bad("the issue number is not a positive integer")
	}
	origin := u.Scheme + "://" + u.Host
	k, err := kindOf(u, getenv)
	if err != nil {
		return bad(err.Error())
	}
	if k == "gitlab" {
		project := strings.TrimSuffix(rest, "/-")
		if project == "" || project == "-" || strings.Contains(project, "/-/") || !strings.Contains(project, "/") {
			return bad("no project path before /-/issues/")
		}
		return NewGitLab(apiOf(getenv, "SMOLVM_GITLAB_API", origin+"/api/v4"), project, token, hc), n, nil
	}
	owner, repo, ok := strings.Cut(rest, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return bad("want https://HOST/OWNER/REPO/issues/N")
	}
	if k == "gitea" {
		return NewGitea(apiOf(getenv, "SMOLVM_GITEA_API", origin+"/api/v1"), owner, repo, token, hc), n, nil
	}
	api := origin + "/api/v3"
	if u.Hostname() == "github.com" {
		api = "https://api.github.com"
	}
	return NewGitHub(apiOf(getenv, "SMOLVM_GITHUB_API", api), owner, repo, token, hc), n, nil
}

// kindOf says which forge serves u: "github", "gitlab" or "gitea" (see Parse).
func kindOf(u *url.URL, getenv func(string) string) (string, error) {
	if strings.Contains(u.Path, "/-/issues/") || strings.HasPrefix(strings.TrimPrefix(u.Path, "/"), "-/issues/") {
		return "gitlab", nil
	}
	switch k := getenv("SMOLVM_FORGE"); k {
	case "github", "gitlab", "gitea":
		return k, nil
	case "forgejo":
		return "gitea", nil
	case "":
	default:
		return "", fmt.Errorf("SMOLVM_FORGE=%q: want github, gitlab, gitea or forgejo", k)
	}
	host := u.Hostname()
	switch {
	case host == "gitlab.com" || strings.HasPrefix(host, "gitlab."):
		return "gitlab", nil
	case host == "gitea.com" || host == "codeberg.org" || strings.HasPrefix(host, "gitea.") || strings.HasPrefix(host, "forgejo."):
		return "gitea", nil
	}
	return "github", nil
}

// apiOf is the API base the variable env names, else def.
func apiOf(getenv func(string) string, env, def string) string {
	if v := getenv(env); v != "" {
		return v
	}
	return def
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// TokenFromEnv returns the token for a forge at issueURL:
// SMOLVM_FORGE_TOKEN, else GITLAB_TOKEN for a GitLab address, GITEA_TOKEN
// or FORGEJO_TOKEN for a Gitea one, GITHUB_TOKEN or GH_TOKEN for GitHub
// (the forge as Parse decides it).
func TokenFromEnv(issueURL string, getenv func(string) string) string {
	if t := getenv("SMOLVM_FORGE_TOKEN"); t != "" {
		return t
	}
	u, err := url.Parse(issueURL)
	if err != nil {
		return ""
	}
	k, _ := kindOf(u, getenv)
	var names []string
	switch k {
	case "gitlab":
		names = []string{"GITLAB_TOKEN"}
	case "gitea":
		names = []string{"GITEA_TOKEN", "FORGEJO_TOKEN"}
	default:
		names = []string{"GITHUB_TOKEN", "GH_TOKEN"}
	}
	for _, name := range names {
		if t := getenv(name); t != "" {
			return t
		}
	}
	return ""
}

// draftTitle is pr's title, marked with prefix when pr is a draft on a
// forge that marks drafts by title (GitLab's "Draft: ", Gitea's "WIP: ").
func draftTitle(pr PullRequest, prefix string) string {
	mark := strings.ToLower(strings.TrimSpace(prefix))
	if !pr.Draft || strings.HasPrefix(strings.ToLower(pr.Title), mark) {
		return pr.Title
	}
	return prefix + pr.Title
}

// client sends JSON requests to a forge's API and maps its errors.
type client struct {
	name   string // "github", "gitlab" or "gitea", for errors
	api    string
	hc     *http.Client
	header http.Header
}

func newClient(name, api string, hc *http.Client, header http.Header) client {
	if hc == nil {
		hc = http.DefaultClient
	}
	header.Set("User-Agent", userAgent)
	return client{name: name, api: strings.TrimRight(api, "/"), hc: hc, header: header}
}

// Error is a forge's error answer.
type Error struct {
	Forge   string
	Method  string
	Path    string
	Status  int
	Message string // the forge's message, with its details
	// RateLimited: GitHub's 403/429 with X-RateLimit-Remaining: 0 or a
	// "rate limit" message (its secondary limits). Retrying later works.
	RateLimited bool
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s %s: HTTP %d: %s", e.Forge, e.Method, e.Path, e.Status, e.Message)
}

// Is matches the error's class: a rate limit unavailable, 404 not found,
// 401/403 denied, 409
// conflict, 422 conflict when something already exists (GitHub's
// "A pull request already exists") and invalid otherwise, 429/5xx
// unavailable, any other 4xx invalid.
func (e *Error) Is(target error) bool {
	var class error
	switch {
	case e.RateLimited:
		class = errdefs.ErrUnavailable
	case e.Status == http.StatusNotFound:
		class = errdefs.ErrNotFound
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		class = errdefs.ErrDenied
	case e.Status == http.StatusConflict:
		class = errdefs.ErrConflict
	case e.Status == http.StatusUnprocessableEntity && strings.Contains(strings.ToLower(e.Message), "already exist"):
		class = errdefs.ErrConflict
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		class = errdefs.ErrUnavailable
	default:
		class = errdefs.ErrInvalid
	}
	return target == class
}

// do sends method path (already escaped) with in as its JSON body, and
// decodes a 2xx answer into out.
func (c client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode %s: %w", c.name, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, body)
	if err != nil {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: %s %s: %v", c.name, method, path, err))
	}
	req.Header = c.header.Clone()
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %s %s: %w", c.name, method, path, ctx.Err())
		}
		return fmt.Errorf("%s: %s %s: %w: %w", c.name, method, path, errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("%s: %s %s: read answer: %w: %w", c.name, method, path, errdefs.ErrUnavailable, err)
	}
	if len(raw) > maxAnswer {
		return errdefs.New(errdefs.ErrQuota, fmt.Sprintf("%s: %s %s: answer over %d bytes", c.name, method, path, maxAnswer))
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Forge: c.name, Method: method, Path: path, Status: resp.StatusCode, Message: message(raw)}
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests {
			e.RateLimited = resp.Header.Get("X-RateLimit-Remaining") == "0" || strings.Contains(strings.ToLower(e.Message), "rate limit")
			if v := resp.Header.Get("Retry-After"); v != "" {
				e.Message += " (retry after " + v + " s)"
			} else if v := resp.Header.Get("X-RateLimit-Reset"); v != "" {
				e.Message += " (limit resets at " + v + ", Unix time)"
			}
		}
		return e
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: %s %s: decode answer: %w: %w", c.name, method, path, errdefs.ErrInvalid, err)
	}
	return nil
}

// message reads an error body: GitHub's {"message", "errors": [{"message"}
// or {"code", "field"}]}, GitLab's {"message": string | {field: [msgs]} |
// [msgs]} or {"error": string}; else the start of the body.
func message(raw []byte) string {
	var body struct {
		Message json.RawMessage `json:"message"`
		Error   string          `json:"error"`
		Errors  []struct {
			Message, Code, Field, Resource string
		} `json:"errors"`
	}
	if json.Unmarshal(raw, &body) != nil {
		s := strings.TrimSpace(string(raw[:min(len(raw), 512)]))
		if s == "" {
			return "(no message)"
		}
		return s
	}
	var parts []string
	var s string
	var list []string
	var fields map[string]json.RawMessage
	switch {
	case json.Unmarshal(body.Message, &s) == nil:
		parts = append(parts, s)
	case json.Unmarshal(body.Message, &list) == nil:
		parts = append(parts, list...)
	case json.Unmarshal(body.Message, &fields) == nil:
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			parts = append(parts, k+" "+strings.Trim(string(fields[k]), "[]\""))
		}
	}
	if body.Error != "" {
		parts = append(parts, body.Error)
	}
	for _, e := range body.Errors {
		switch {
		case e.Message != "":
			parts = append(parts, e.Message)
		case e.Code != "":
			parts = append(parts, strings.TrimSpace(e.Resource+" "+e.Field+" "+e.Code))
		}
	}
	if len(parts) == 0 {
		return "(no message)"
	}
	return strings.Join(parts, ": ")
}

func checkNumber(forge string, n int) error {
	if n <= 0 {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: issue number %d: want a positive integer", forge, n))
	}
	return nil
}

func checkPR(forge string, pr PullRequest) error {
	if pr.Head == "" || pr.Base == "" || strings.TrimSpace(pr.Title) == "" {
		return errdefs.New(errdefs.ErrInvalid, fmt.Sprintf("%s: a pull request needs a head branch, a base branch and a title", forge))
	}
	return nil
}
