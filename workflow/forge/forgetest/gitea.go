package forgetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/tests/testenv"
)

// Gitea is a real Gitea server on loopback (the binary
// scripts/gitea-tools.sh builds), configured without its web installer:
// SQLite in a temporary directory, no SSH, no mail, one admin user with an
// API token.
type Gitea struct {
	URL   string // web pages and git over HTTP: http://127.0.0.1:PORT
	User  string // the admin, owner of the repositories CreateRepo makes
	Token string // the admin's access token (all scopes)
	Dir   string // app.ini, the database, repositories, logs

	bin, config string
}

// API is the REST API's base URL.
func (g *Gitea) API() string { return g.URL + "/api/v1" }

// appINI configures Gitea for a test: loopback only, offline, SQLite, and
// INSTALL_LOCK so that no installer runs. Gitea refuses root unless told
// (I_AM_BEING_UNSAFE_RUNNING_AS_ROOT), and RUN_USER must be whoever runs it.
const appINI = `APP_NAME = smolvm-test
RUN_MODE = prod
RUN_USER = %[1]s
WORK_PATH = %[2]s
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = http://127.0.0.1:%[3]d/
LOCAL_ROOT_URL = http://127.0.0.1:%[3]d/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
APP_DATA_PATH = %[2]s/data
STATIC_ROOT_PATH = %[4]s

[database]
DB_TYPE = sqlite3
PATH = %[2]s/data/gitea.db

[repository]
ROOT = %[2]s/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[5]s
INTERNAL_TOKEN = %[6]s

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[queue]
TYPE = channel

[cache]
ADAPTER = memory

[session]
PROVIDER = memory

[mailer]
ENABLED = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[log]
MODE = console
LEVEL = Warn
ROOT_PATH = %[2]s/log
`

// NewGitea starts a Gitea server for t (skipped without the binary, but
// failed in CI: testenv.Gitea) and stops it on t.Cleanup.
func NewGitea(t testing.TB) *Gitea {
	t.Helper()
	bin := testenv.Gitea(t)
	dir := t.TempDir()
	port := freePort(t)
	g := &Gitea{URL: fmt.Sprintf("http://127.0.0.1:%d", port), User: "smolvm", Dir: dir, bin: bin, config: filepath.Join(dir, "app.ini")}
	who, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(appINI, who.Username, dir, port, filepath.Dir(bin), secret(t), secret(t))
	if err := os.WriteFile(g.config, []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	// admin user create needs the tables: migrate makes them.
	g.cli(t, "migrate")
	g.cli(t, "admin", "user", "create", "--username", g.User, "--password", "smolvm-test-pw", "--email", "smolvm@localhost",
		"--admin", "--must-change-password=false")
	g.Token = strings.TrimSpace(g.cli(t, "admin", "user", "generate-access-token", "--username", g.User,
		"--token-name", "test", "--scopes", "all", "--raw"))
	g.serve(t)
	return g
}

// cli runs a gitea subcommand on g's configuration and returns its stdout.
func (g *Gitea) cli(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(g.bin, append([]string{"--config", g.config, "--work-path", g.Dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gitea %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// serve starts gitea web and waits for /api/healthz.
func (g *Gitea) serve(t testing.TB) {
	t.Helper()
	log, err := os.Create(filepath.Join(g.Dir, "web.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(g.bin, "--config", g.config, "--work-path", g.Dir, "web")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(g.URL + "/api/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("gitea web exited: %v\n%s", err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("gitea web not healthy after 2 minutes: %v\n%s", err, out)
		}
	}
}

// Call sends method path (under the API) as the admin, with in as its JSON
// body, and decodes the answer into out (nil: ignored). It fails t on a
// non-2xx answer.
func (g *Gitea) Call(t testing.TB, method, path string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, g.API()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+g.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("gitea: %s %s: HTTP %d: %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("gitea: %s %s: %v: %s", method, path, err, raw)
		}
	}
}

// CreateRepo makes an empty repository name owned by the admin, whose
// default branch is main.
func (g *Gitea) CreateRepo(t testing.TB, name string) {
	t.Helper()
	g.Call(t, http.MethodPost, "/user/repos", map[string]any{"name": name, "default_branch": "main", "private": false}, nil)
}

// CreateIssue opens an issue on the admin's repository and returns its
// web address.
func (g *Gitea) CreateIssue(t testing.TB, repo, title, body string) string {
	t.Helper()
	var out struct {
		HTMLURL string `json:"html_url"`
	}
	g.Call(t, http.MethodPost, fmt.Sprintf("/repos/%s/%s/issues", g.User, repo), map[string]any{"title": title, "body": body}, &out)
	return out.HTMLURL
}

// Remote is the admin's repository as a git remote over HTTP, with the
// token as the password.
func (g *Gitea) Remote(repo string) string {
	u, _ := url.Parse(g.URL)
	u.User = url.UserPassword(g.User, g.Token)
	u.Path = "/" + g.User + "/" + repo + ".git"
	return u.String()
}

// PRs lists the pull requests of the admin's repository, open and closed.
func (g *Gitea) PRs(t testing.TB, repo string) []PR {
	t.Helper()
	var list []struct {
		Number  int    `json:"number"`
		Title   string `json:"title"`
		Body    string `json:"body"`
		HTMLURL string `json:"html_url"`
		Draft   bool   `json:"draft"`
		Head    struct {
			Ref string `json:"ref"`
			SHA string `json:"sha"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	}
	g.Call(t, http.MethodGet, fmt.Sprintf("/repos/%s/%s/pulls?state=all", g.User, repo), nil, &list)
	var out []PR
	for _, p := range list {
		out = append(out, PR{Forge: "gitea", Repo: g.User + "/" + repo, Number: p.Number, Head: p.Head.Ref, Base: p.Base.Ref,
			Title: p.Title, Body: p.Body, Draft: p.Draft, URL: p.HTMLURL})
	}
	return out
}

// freePort is a loopback port nothing listens on (now).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func secret(t testing.TB) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
