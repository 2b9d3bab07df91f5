package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/server/console"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
	"smolvm.dev/smolvm/workflow/memory"
)

// serve is a real smolvm serve with two tenants, each with a key, and
// sandboxes of the admin's and of each tenant's.
type serve struct {
	*testserve.Server
	dir  string // its data dir
	keys map[string]string
	ids  map[string]string // sandbox name -> ID
}

func call(t testing.TB, c *http.Client, key, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// must is call that fails the test on an answer other than 2xx, and
// decodes it into v.
func (s *serve) must(t testing.TB, key, method, path, body string, v any) {
	t.Helper()
	code, out := call(t, http.DefaultClient, key, method, s.URL+path, body)
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, out)
		}
	}
}

func newServe(t *testing.T) *serve {
	env := testmgr.New(t)
	s := &serve{Server: testserve.Start(t, env.Dir, env.GuestBinary), dir: env.Dir, keys: map[string]string{}, ids: map[string]string{}}
	for _, name := range []string{"ta", "tb"} {
		s.must(t, s.Token, "POST", "/v1/tenants", `{"name":"`+name+`"}`, nil)
		var k api.NewKey
		s.must(t, s.Token, "POST", "/v1/tenants/"+name+"/keys", "", &k)
		s.keys[name] = k.Key
	}
	for _, sb := range []struct{ key, name, cmd string }{
		{s.Token, "web", `["sh","-c","echo console-log-line; sleep 1000"]`},
		{s.Token, "worker", `["sleep","1000"]`},
		{s.keys["ta"], "ta-box", `["sleep","1000"]`},
		{s.keys["tb"], "tb-box", `["sleep","1000"]`},
	} {
		var out struct{ ID string }
		s.must(t, sb.key, "POST", "/v1/sandboxes", `{"name":"`+sb.name+`","cmd":`+sb.cmd+`,"timeout":"1h"}`, &out)
		s.ids[sb.name] = out.ID
	}
	return s
}

// browser is a client that keeps cookies, signed in with key.
func (s *serve) browser(t *testing.T, key string) (*http.Client, console.Session) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	code, body := call(t, c, "", "POST", s.URL+"/ui/session", `{"key":"`+key+`"}`)
	var sess console.Session
	if code != http.StatusOK || json.Unmarshal([]byte(body), &sess) != nil {
		t.Fatalf("sign-in: %d %s", code, body)
	}
	return c, sess
}

func (s *serve) state(t *testing.T, name string) string {
	var sb struct{ State string }
	s.must(t, s.Token, "GET", "/v1/sandboxes/"+s.ids[name], "", &sb)
	return sb.State
}

// TestConsoleServe drives a real smolvm serve through its console's
// credential with plain HTTP: a tenant's session reaches its own objects
// only, every action without the CSRF token is refused and changes
// nothing (the exec WebSocket too), and with it works.
func TestConsoleServe(t *testing.T) {
	testenv.Integration(t)
	testenv.NeedRoot(t)
	s := newServe(t)
	c, sess := s.browser(t, s.keys["ta"])
	if sess.Tenant != "ta" || sess.Admin {
		t.Fatalf("session %+v, want tenant ta", sess)
	}
	code, body := call(t, c, "", "GET", s.URL+"/v1/sandboxes", "")
	if code != http.StatusOK || !strings.Contains(body, s.ids["ta-box"]) || strings.Contains(body, s.ids["tb-box"]) || strings.Contains(body, s.ids["web"]) {
		t.Errorf("ta's list: %d %s", code, body)
	}
	other := s.URL + "/v1/sandboxes/" + s.ids["tb-box"]
	for _, r := range []struct{ method, url, body string }{{"GET", other, ""}, {"POST", other + "/stop", "{}"}, {"DELETE", other, ""}} {
		if code, body := call(t, c, "", r.method, r.url, r.body, console.CSRFHeader, sess.CSRF); code != http.StatusNotFound {
			t.Errorf("ta's session: %s another tenant's sandbox: %d %s, want 404", r.method, code, body)
		}
	}
	if st := s.state(t, "tb-box"); st != "running" {
		t.Errorf("tb-box is %s after ta's attempts, want running", st)
	}

	own := s.URL + "/v1/sandboxes/" + s.ids["ta-box"]
	for _, hdr := range [][]string{nil, {console.CSRFHeader, strings.ToUpper(sess.CSRF)}} {
		for _, r := range []struct{ method, url, body string }{{"POST", own + "/stop", "{}"}, {"POST", own + "/pause", ""}, {"DELETE", own, ""}, {"POST", s.URL + "/v1/sandboxes", `{"name":"x"}`}} {
			if code, body := call(t, c, "", r.method, r.url, r.body, hdr...); code != http.StatusForbidden || !strings.Contains(body, console.CSRFHeader) {
				t.Errorf("%s %s with %v: %d %s, want 403", r.method, r.url, hdr, code, body)
			}
		}
	}
	if st := s.state(t, "ta-box"); st != "running" {
		t.Errorf("ta-box is %s after refused actions, want running", st)
	}

	// A sandbox's port is not the session's to open: its pages would run
	// on the console's origin, and its server would get the cookie.
	for _, method := range []string{"GET", "POST"} {
		if code, body := call(t, c, "", method, own+"/ports/8080/", "", console.CSRFHeader, sess.CSRF); code != http.StatusUnauthorized {
			t.Errorf("%s a port of ta-box with ta's session: %d %s, want 401", method, code, body)
		}
	}

	// The exec WebSocket: the token in its URL, or no shell.
	ws := strings.Replace(own, "http", "ws", 1) + "/exec/ws"
	opts := &websocket.DialOptions{HTTPClient: c}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if conn, resp, err := websocket.Dial(ctx, ws, opts); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("exec WebSocket without the token: %v, %v; want 403", resp, err)
		if conn != nil {
			conn.CloseNow()
		}
	}
	conn, _, err := websocket.Dial(ctx, ws+"?"+console.CSRFParam+"="+sess.CSRF, opts)
	if err != nil {
		t.Fatalf("exec WebSocket with the token: %v", err)
	}
	defer conn.CloseNow()
	conn.Write(ctx, websocket.MessageText, []byte(`{"args":["sh","-c","echo from-the-console"]}`))
	var out bytes.Buffer
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("exec WebSocket: %v (output %q)", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(b[1:])
			continue
		}
		break
	}
	if !strings.Contains(out.String(), "from-the-console") {
		t.Errorf("exec over the session: %q", out.String())
	}

	if code, body := call(t, c, "", "POST", own+"/stop", "{}", console.CSRFHeader, sess.CSRF); code != http.StatusOK {
		t.Errorf("stop with the token: %d %s", code, body)
	}
	if st := s.state(t, "ta-box"); st != "stopped" {
		t.Errorf("ta-box is %s after a stop with the token", st)
	}
	// Signed out, the cookie opens nothing.
	if code, _ := call(t, c, "", "DELETE", s.URL+"/ui/session", "", console.CSRFHeader, sess.CSRF); code != http.StatusNoContent {
		t.Errorf("sign-out: %d", code)
	}
	if code, _ := call(t, c, "", "GET", s.URL+"/v1/sandboxes", ""); code != http.StatusUnauthorized {
		t.Errorf("after sign-out: %d, want 401", code)
	}
}

// browserTest finds node, Chromium and sdk/console-test's packages
// (installing them from its lockfile when missing), or skips.
func browserTest(t testing.TB) (node, chromium, dir string) {
	t.Helper()
	testenv.Integration(t)
	var err error
	if node, err = exec.LookPath("node"); err == nil {
		chromium, err = exec.LookPath("chromium")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node and chromium are required in CI: %v", err)
		}
		t.Skip(err)
	}
	_, file, _, _ := runtime.Caller(0)
	dir = filepath.Join(filepath.Dir(file), "..", "..", "sdk", "console-test")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "axe-core", "package.json")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return node, chromium, dir
}

// report is what console.mjs prints.
type report struct {
	Errors []string
	Checks []struct {
		Name, Detail string
		OK           bool
	}
	Axe     map[string][]string
	Figures map[string]json.RawMessage
}

// runScript runs console.mjs with cfg and returns its report.
func runScript(t testing.TB, cfg map[string]any) report {
	t.Helper()
	node, chromium, dir := browserTest(t)
	cfg["chromium"] = chromium
	b, _ := json.Marshal(cfg)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.mjs", path)
	cmd.Dir = dir
	out, err := cmd.Output()
	var r report
	if jerr := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &r); err != nil || jerr != nil {
		t.Fatalf("console.mjs: %v %v\n%s", err, jerr, out)
	}
	return r
}

// agentRun runs an agent CLI (a sed that fixes the bug) on a small node
// repository through the API, and waits for its end.
func (s *serve) agentRun(t *testing.T) string {
	t.Helper()
	repo := testenv.GitRepo(t, map[string]string{
		"calc.js": "exports.add = (a, b) => a - b;\n",
		"calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n" +
			"test('add', () => { assert.strictEqual(require('./calc.js').add(2, 3), 5); });\n",
	})
	var run api.AgentRun
	req, _ := json.Marshal(map[string]any{"task": "fix add", "repo": repo, "test": "node --test --test-reporter=tap", "agent": `sed -i "s/a - b/a + b/" calc.js`, "max_iterations": 3})
	s.must(t, s.Token, "POST", "/v1/agent/runs", string(req), &run)
	for deadline := time.Now().Add(5 * time.Minute); run.State == "running"; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("agent run %s still running", run.ID)
		}
		var l api.AgentRunLog
		s.must(t, s.Token, "GET", "/v1/agent/runs/"+run.ID, "", &l)
		run = l.Run
	}
	if run.State != "resolved" {
		t.Fatalf("agent run %s ended %s: %s", run.ID, run.State, run.Reason)
	}
	return run.ID
}

// fanout runs smolvm branch as users do against a server (--host, state
// in the server's data dir): three sub-tasks, of which two change the same
// line and one breaks CI; the merge queue merges the first, hands the
// conflict of the second to a resolver that settles it, and leaves the red
// one out. It returns the run's ID.
func (s *serve) fanout(t *testing.T) string {
	t.Helper()
	const lib = "add() { echo $(($1 + $2)); }\ngreet() { echo ok; }\nVERSION=1\n"
	repo := testenv.GitRepo(t, map[string]string{
		"lib.sh": lib, "cmd/main.sh": ". ./lib.sh; greet\n",
		// CI: TAP from sh; VERSION must be a number, every cmd/*.sh print ok.
		"test.sh": "n=0; bad=0\ncheck() { n=$((n+1)); if [ \"$2\" = \"$3\" ]; then echo \"ok $n - $1\"; else echo \"not ok $n - $1\"; bad=1; fi; }\n" +
			"echo 'TAP version 13'\ncheck version \"$( (. ./lib.sh && [ \"$VERSION\" -ge 1 ] && echo ok) 2>/dev/null)\" ok\n" +
			"for f in cmd/*.sh; do check \"$(basename \"$f\")\" \"$(sh \"$f\" 2>&1)\" ok; done\necho \"1..$n\"\nexit $bad\n",
	})
	tasks := filepath.Join(t.TempDir(), "tasks")
	os.WriteFile(tasks, []byte("do: sed -i 's/VERSION=1/VERSION=2/' lib.sh\ndo: sed -i 's/VERSION=1/VERSION=3/' lib.sh\ndo: sed -i 's/echo ok/echo no/' lib.sh\n"), 0o644)
	smolvm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(testenv.Smolvm(t), append([]string{"--host", s.URL, "--data-dir", s.dir}, args...)...)
		cmd.Env = append(os.Environ(), "SMOLVM_TOKEN="+s.Token)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("smolvm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}
	// The agent runs the task's "do: " line.
	agent := `sh -c "$(sed -n 's/^do: //p' "$SMOLVM_AGENT_PROMPT" | head -n 1)"`
	var view struct{ Run struct{ ID string } }
	out := smolvm("branch", "fanout", "--repo", repo, "--tasks", tasks, "--agent", agent, "--test", "sh test.sh", "--setup", "",
		"--max-iterations", "1", "--stuck-after", "1", "--flaky-reruns", "-1", "--concurrency", "2", "--max-time", "3m", "--json")
	if err := json.Unmarshal([]byte(out), &view); err != nil || view.Run.ID == "" {
		t.Fatalf("branch fanout: %v\n%s", err, out)
	}
	resolved := strings.ReplaceAll(lib, "VERSION=1", "VERSION=3")
	smolvm("branch", "merge", view.Run.ID, "--resolver", "printf '"+resolved+"' > lib.sh", "--resolver-iterations", "1", "--resolver-time", "3m")
	return view.Run.ID
}

// memoryRepo is a repository with a valid fact and a proposed one, both
// anchored to a file that has changed since (uncommitted).
func memoryRepo(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	repo := testenv.GitRepo(t, map[string]string{"calc.js": "exports.add = (a, b) => a + b;\n"})
	m, err := memory.Open(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"repo": repo}
	for _, f := range []struct {
		key, text string
		proposed  bool
	}{{"valid", "add adds", false}, {"proposed", "add is pure", true}} {
		fact, err := m.Add(ctx, memory.AddOptions{Text: f.text, Kind: memory.Convention, Author: "agent:scripted",
			Anchors: []memory.Anchor{{Path: "calc.js"}}, Proposed: f.proposed})
		if err != nil {
			t.Fatal(err)
		}
		out[f.key] = fact.ID
	}
	if err := os.WriteFile(filepath.Join(repo, "calc.js"), []byte("exports.add = (a, b) => b + a;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConsoleBrowser drives every view in Chromium (console.mjs): the real
// data renders, actions work and show, live updates arrive, a tenant
// reaches only its own objects and nothing acts without the CSRF token;
// no console errors, no axe-core violations. SMOLVM_CONSOLE_SHOTS=DIR
// keeps a screenshot of each view there (docs/console).
func TestConsoleBrowser(t *testing.T) {
	browserTest(t)
	testenv.NeedRoot(t)
	s := newServe(t)
	shots := os.Getenv("SMOLVM_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if abs, err := filepath.Abs(shots); err == nil {
		shots = abs
	}
	r := runScript(t, map[string]any{
		"url": s.URL, "admin": s.Token, "running": s.ids["web"], "stopped": s.ids["worker"], "logLine": "console-log-line",
		"shots": shots, "run": s.agentRun(t), "memory": memoryRepo(t), "fanout": s.fanout(t),
		"tenant": map[string]any{"key": s.keys["ta"], "own": s.ids["ta-box"], "other": s.ids["tb-box"], "count": 1},
	})
	for _, c := range r.Checks {
		if !c.OK {
			t.Errorf("%s: failed %s", c.Name, c.Detail)
		}
	}
	if len(r.Checks) < 12 {
		t.Errorf("only %d checks ran", len(r.Checks))
	}
	for _, e := range r.Errors {
		t.Errorf("browser: %s", e)
	}
	for view, v := range r.Axe {
		for _, f := range v {
			t.Errorf("axe on %s: %s", view, f)
		}
	}
	t.Logf("first load: %s bytes compressed, sign-in usable after %s ms", r.Figures["first_load_bytes"], r.Figures["signin_interactive_ms"])
}
