package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/server/mcpserver"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
)

// session starts `smolvm mcp` as a child process over a fresh data dir and
// connects the MCP SDK's own client to it over stdio.
func session(t *testing.T) *mcp.ClientSession {
	t.Helper()
	// A manager over the same data dir removes what the server left.
	env := testmgr.New(t)
	cmd := exec.Command(testenv.Smolvm(t), "--data-dir", env.Dir, "--runsc", testenv.Runsc(t), "mcp")
	cmd.Env = append(os.Environ(), "SMOLVM_GUEST_BINARY="+env.GuestBinary)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "smolvm-test", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call invokes a tool and decodes its structured result into out. It
// returns the tool's error text, "" on success.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, tc.Text)
			}
		}
		return strings.Join(msg, "\n")
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: result %s: %v", tool, b, err)
	}
	return ""
}

func must(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	if msg := call(t, cs, tool, args, out); msg != "" {
		t.Fatalf("%s %v: %s", tool, args, msg)
	}
}

type sbInfo struct {
	ID, Name, State string
	ExpiresAt       *time.Time `json:"expires_at"`
}

type execResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func TestToolsOverStdio(t *testing.T) {
	cs := session(t)
	ctx := context.Background()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"sandbox_create", "sandbox_exec", "file_read", "file_write", "sandbox_checkpoint", "sandbox_restore", "snapshot_remove", "sandbox_fork"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Fatalf("tool %s missing from %v", want, names)
		}
	}

	var sb sbInfo
	must(t, cs, "sandbox_create", map[string]any{"name": "agent-box", "env": map[string]string{"GREETING": "hello"}}, &sb)
	if sb.State != "running" || sb.Name != "agent-box" || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 10*time.Minute {
		t.Fatalf("created %+v, want running with the default time to live", sb)
	}

	var ex execResult
	must(t, cs, "sandbox_exec", map[string]any{"sandbox": "agent-box", "command": "echo $GREETING; echo oops >&2; exit 4"}, &ex)
	if ex.ExitCode != 4 || ex.Stdout != "hello\n" || ex.Stderr != "oops\n" {
		t.Fatalf("exec: %+v", ex)
	}
	must(t, cs, "sandbox_exec", map[string]any{"sandbox": sb.ID, "command": "cat", "stdin": "piped"}, &ex)
	if ex.Stdout != "piped" {
		t.Fatalf("exec with stdin: %+v", ex)
	}

	var w struct{ Path string }
	must(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "/work/notes.txt", "content": "step 1"}, &w)
	var r struct{ Content, Encoding string }
	must(t, cs, "file_read", map[string]any{"sandbox": sb.ID, "path": "/work/notes.txt"}, &r)
	if r.Content != "step 1" || r.Encoding != "utf-8" {
		t.Fatalf("read back %+v", r)
	}
	must(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "/work/bin", "content": "AP8=", "encoding": "base64"}, &w)
	must(t, cs, "file_read", map[string]any{"sandbox": sb.ID, "path": "/work/bin"}, &r)
	if r.Content != "AP8=" || r.Encoding != "base64" {
		t.Fatalf("binary read back %+v", r)
	}

	var snap struct{ Snapshot string }
	must(t, cs, "sandbox_checkpoint", map[string]any{"sandbox": sb.ID, "name": "step1"}, &snap)
	if len(snap.Snapshot) != 64 {
		t.Fatalf("checkpoint: %+v", snap)
	}
	must(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "/work/notes.txt", "content": "step 2"}, &w)

	var restored sbInfo
	must(t, cs, "sandbox_restore", map[string]any{"snapshot": "step1", "name": "rewound"}, &restored)
	must(t, cs, "file_read", map[string]any{"sandbox": "rewound", "path": "/work/notes.txt"}, &r)
	if r.Content != "step 1" {
		t.Fatalf("the restored sandbox reads %q, want the checkpoint's", r.Content)
	}

	// A snapshot nothing rests on goes, and a restore of it then fails.
	var rm struct{ Removed string }
	must(t, cs, "sandbox_checkpoint", map[string]any{"sandbox": sb.ID, "name": "scratch"}, &snap)
	must(t, cs, "snapshot_remove", map[string]any{"snapshot": "scratch"}, &rm)
	if rm.Removed != "scratch" {
		t.Fatalf("snapshot_remove: %+v", rm)
	}
	if msg := call(t, cs, "sandbox_restore", map[string]any{"snapshot": "scratch"}, &restored); !strings.Contains(msg, "scratch") {
		t.Fatalf("restore of a removed snapshot: %q", msg)
	}

	var forks struct{ Sandboxes []sbInfo }
	must(t, cs, "sandbox_fork", map[string]any{"sandbox": sb.ID, "count": 2}, &forks)
	if len(forks.Sandboxes) != 2 {
		t.Fatalf("fork: %+v", forks)
	}
	for _, f := range forks.Sandboxes {
		must(t, cs, "file_read", map[string]any{"sandbox": f.ID, "path": "/work/notes.txt"}, &r)
		if r.Content != "step 2" {
			t.Fatalf("fork %s reads %q", f.ID, r.Content)
		}
	}

	// Bad input is a tool error the model can read, never a crash.
	for _, c := range []struct {
		tool    string
		args    map[string]any
		mention string
	}{
		{"sandbox_exec", map[string]any{"sandbox": "nope", "command": "true"}, "never existed"},
		{"file_read", map[string]any{"sandbox": sb.ID, "path": "/work/../etc/passwd"}, ".."},
		{"file_read", map[string]any{"sandbox": sb.ID, "path": "relative"}, "absolute"},
		{"file_read", map[string]any{"sandbox": sb.ID, "path": "/work/missing"}, "no such file"},
		{"file_write", map[string]any{"sandbox": sb.ID, "path": "/work/x", "content": "x", "encoding": "rot13"}, "encoding"},
		{"sandbox_fork", map[string]any{"sandbox": sb.ID, "count": 1000}, "count"},
	} {
		if msg := call(t, cs, c.tool, c.args, &struct{}{}); !strings.Contains(msg, c.mention) {
			t.Errorf("%s %v: error %q does not mention %q", c.tool, c.args, msg, c.mention)
		}
	}
	// An unknown tool is the SDK's JSON-RPC error (smolvm mcp once died of it).
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("an unknown tool: %v, want the SDK's unknown tool error", err)
	}
	// The server is still there after all that.
	var list struct{ Sandboxes []sbInfo }
	must(t, cs, "sandbox_list", nil, &list)
	if len(list.Sandboxes) != 4 {
		t.Fatalf("list: %+v", list)
	}
}

// TestToolErrorsCarryClass: tool errors from the real server name their
// class, in _meta and before the message.
func TestToolErrorsCarryClass(t *testing.T) {
	cs := session(t)
	for _, c := range []struct {
		tool  string
		args  map[string]any
		class string
	}{
		{"sandbox_exec", map[string]any{"sandbox": "nope", "command": "true"}, "not_found"},
		{"sandbox_remove", map[string]any{"sandbox": "nope"}, "not_found"},
		{"sandbox_create", map[string]any{"name": "bad name"}, "invalid"},
		{"file_read", map[string]any{"sandbox": "nope", "path": "relative"}, "invalid"},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		text := ""
		if len(res.Content) == 1 {
			text = res.Content[0].(*mcp.TextContent).Text
		}
		if !res.IsError || res.Meta[mcpserver.MetaClass] != c.class || !strings.HasPrefix(text, c.class+": ") {
			t.Errorf("%s %v: error %v, meta %v, text %q; want class %q", c.tool, c.args, res.IsError, res.Meta, text, c.class)
		}
	}
}
