package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// keyCall sends a request to srv with key as X-API-KEY (what E2B's SDK
// sends; the native API takes it too).
func keyCall(t *testing.T, srv *testserve.Server, key, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-KEY", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTenantServe runs a real smolvm serve and manages its tenants with
// the CLI on the same data dir while it serves: keys work at once and
// stop at once when revoked, quotas answer with the limit, and one
// tenant's key reaches nothing of another's on the native API, E2B's API
// and MCP (smolvm mcp --host with the key).
func TestTenantServe(t *testing.T) {
	env := testmgr.New(t)
	srv := testserve.Start(t, env.Dir, env.GuestBinary)
	c := newCLI(t, env.Dir)

	c.must("tenant", "add", "team", "--sandboxes", "1")
	c.must("tenant", "add", "other")
	keys := map[string]api.NewKey{}
	for _, name := range []string{"team", "other"} {
		var k api.NewKey
		if err := json.Unmarshal([]byte(c.must("tenant", "key", "add", name, "--json")), &k); err != nil || k.Key == "" {
			t.Fatalf("key add %s: %v", name, err)
		}
		keys[name] = k
	}
	if out := c.must("tenant", "ls"); !strings.Contains(out, "team") || !strings.Contains(out, keys["team"].ID) || strings.Contains(out, keys["team"].Key) {
		t.Fatalf("tenant ls shows no key ID, or the secret:\n%s", out)
	}
	for _, bad := range [][]string{{"tenant", "add", "admin"}, {"tenant", "add", "../x"}, {"tenant", "quota", "nobody"},
		{"tenant", "key", "rm", "team", "ffff"}, {"tenant", "quota", "team", "--memory", "lots"}} {
		if _, errOut, code := c.run(bad...); code == 0 || errOut == "" {
			t.Errorf("smolvm %v: exit %d, stderr %q", bad, code, errOut)
		}
	}

	team, other := keys["team"].Key, keys["other"].Key
	code, body := keyCall(t, srv, team, "POST", "/v1/sandboxes", `{"name":"t1","timeout":"1h"}`)
	var sb sandbox.Sandbox
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &sb) != nil {
		t.Fatalf("create with the team's key: %d %s", code, body)
	}
	if code, body := keyCall(t, srv, team, "POST", "/v1/sandboxes", `{"name":"t2"}`); code != http.StatusConflict || !strings.Contains(body, `"class":"quota"`) || !strings.Contains(body, "1 concurrent sandboxes") {
		t.Fatalf("over quota: %d %s", code, body)
	}
	// E2B's table answers a quota with 429.
	if code, body := keyCall(t, srv, team, "POST", "/sandboxes", `{"templateID":"base"}`); code != http.StatusTooManyRequests || !strings.Contains(body, "1 concurrent sandboxes") {
		t.Fatalf("E2B create over quota: %d %s", code, body)
	}
	if out := c.must("tenant", "quota", "team", "--sandboxes", "3", "--memory", "4g"); !strings.Contains(out, "sandboxes=3") || !strings.Contains(out, "memory=4GiB") {
		t.Fatalf("quota: %s", out)
	}

	// E2B's control plane: the other tenant's key gets what a sandbox that
	// never existed gets, and a connect hands it no envd token.
	missing := "0123456789abcdef0123456789abcdef"
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/%s", ""}, {"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
		{"DELETE", "/sandboxes/%s", ""}, {"POST", "/sandboxes/%s/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/%s/pause", ""}, {"GET", "/sandboxes/%s/metrics", ""},
	} {
		c1, b1 := keyCall(t, srv, other, r.method, strings.Replace(r.path, "%s", sb.ID, 1), r.body)
		c2, b2 := keyCall(t, srv, other, r.method, strings.Replace(r.path, "%s", missing, 1), r.body)
		if c1 != c2 || strings.ReplaceAll(b1, sb.ID, missing) != b2 || c1 < 400 {
			t.Errorf("E2B %s %s: another tenant's: %d %s; missing: %d %s", r.method, r.path, c1, b1, c2, b2)
		}
	}
	if code, body := keyCall(t, srv, other, "GET", "/sandboxes", ""); code != http.StatusOK || strings.Contains(body, sb.ID) {
		t.Errorf("E2B list with the other key: %d %s", code, body)
	}
	if code, body := keyCall(t, srv, team, "GET", "/sandboxes", ""); code != http.StatusOK || !strings.Contains(body, sb.ID) {
		t.Errorf("E2B list with the team's key: %d %s", code, body)
	}

	// MCP through serve with the other tenant's key.
	cmd := exec.Command(testenv.Smolvm(t), "--host", srv.URL, "mcp")
	cmd.Env = append(os.Environ(), "SMOLVM_TOKEN="+other)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tenant-test", Version: "v0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_list", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("mcp list: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); strings.Contains(string(b), sb.ID) {
		t.Errorf("mcp list with the other key shows the team's sandbox: %s", b)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox": "t1", "command": "true"}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), "never existed") {
		t.Errorf("mcp exec in the team's sandbox with the other key: %v %s", err, toolText(res))
	}
	// Through serve as directly: file_write makes the parents, and
	// snapshot_remove removes what sandbox_checkpoint made.
	for _, step := range []struct {
		tool string
		args map[string]any
	}{
		{"sandbox_create", map[string]any{"name": "mcp-box"}},
		{"file_write", map[string]any{"sandbox": "mcp-box", "path": "/tmp/made/by/mcp.txt", "content": "deep"}},
		{"sandbox_checkpoint", map[string]any{"sandbox": "mcp-box", "name": "mcp-snap"}},
		{"snapshot_remove", map[string]any{"snapshot": "mcp-snap"}},
		{"sandbox_remove", map[string]any{"sandbox": "mcp-box"}},
	} {
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: step.tool, Arguments: step.args}); err != nil || res.IsError {
			t.Fatalf("mcp --host %s %v: %v %s", step.tool, step.args, err, toolText(res))
		}
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "snapshot_remove", Arguments: map[string]any{"snapshot": "mcp-snap"}})
	if err != nil || !res.IsError || !strings.HasPrefix(toolText(res), "not_found: ") {
		t.Errorf("mcp snapshot_remove of a removed snapshot: %v %s", err, toolText(res))
	}

	// Revoked while serving: the next request is refused.
	c.must("tenant", "key", "rm", "team", keys["team"].ID)
	if code, body := keyCall(t, srv, team, "GET", "/v1/sandboxes", ""); code != http.StatusUnauthorized {
		t.Fatalf("revoked key: %d %s", code, body)
	}
	if code, _ := keyCall(t, srv, other, "GET", "/v1/sandboxes", ""); code != http.StatusOK {
		t.Fatalf("the other key after the team's was revoked: %d", code)
	}
	c.must("tenant", "rm", "other")
	if code, _ := keyCall(t, srv, other, "GET", "/v1/sandboxes", ""); code != http.StatusUnauthorized {
		t.Fatalf("key of a removed tenant: %d", code)
	}
	// What the tenants made stays, for the admin.
	if ids := listIDs(t, srv); len(ids) != 1 || ids[0] != sb.ID {
		t.Fatalf("admin lists %v", ids)
	}
}

func toolText(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, "\n")
}
