package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/server/mcpserver"
)

// fuzzSeeds are lines an agent (or anything else on smolvm mcp's stdin)
// may send: unknown tools, arguments of the wrong types or missing,
// JSON-RPC that is not, and a good call of every tool.
var fuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"no_such_tool"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"sandbox_list"}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox":5,"command":["ls"]}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":"sh -c id"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_fork","arguments":{"sandbox":"a","count":-1e300}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_write","arguments":{"sandbox":"a","path":"/x","content":"\u0000\ud800","encoding":"base64"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"env":{"A":1},"ttl":"forever"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_remove","arguments":{"sandbox":"a"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox":"a","command":"true","stdin":"x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_read","arguments":{"sandbox":"a","path":"/etc/hostname"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_write","arguments":{"sandbox":"a","path":"/x","content":"y"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_checkpoint","arguments":{"sandbox":"a","name":"s"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_restore","arguments":{"snapshot":"s"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_fork","arguments":{"sandbox":"a","count":2}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"browser_screenshot","arguments":{"url":"http://example.test/"}}}`,
	`{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{"cursor":"junk"}}`,
	`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}`,
	`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`,
	`{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"x"}}`,
	`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"loud"}}`,
	`{"jsonrpc":"2.0","id":2,"method":"completion/complete","params":{}}`,
	`{"jsonrpc":"2.0","id":2,"method":"no/such/method"}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":99,"result":{}}`,
	`{"jsonrpc":"2.0","id":99,"error":{"code":1,"message":"x"}}`,
	`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
	`{"jsonrpc":"2.0","method":7}`,
	`{"jsonrpc":"2.0","method":null}`,
	`{"jsonrpc":"2.0","id":4,"method":""}`,
	`{"jsonrpc":"1.0","id":3,"method":"ping"}`,
	`{"id":3,"method":"ping"}`,
	`{"jsonrpc":"2.0"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"} trailing`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}`,
	`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
	`[]`,
	`null`,
	`"ping"`,
	`{`,
	`not json at all`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}",
	"",
	"\r",
}

// followUpID names the request every fuzz run ends with.
const followUpID = "smolvm-fuzz-follow-up"

// FuzzJSONRPC gives smolvm mcp's server (its stdio transport and tools)
// one line of anything after the handshake, then a tools/list, which it
// must answer: no input may panic the server or end the session. Its
// tools drive a client of a server that is not there, so every call that
// reaches the service fails at once; the seeds run in every go test.
func FuzzJSONRPC(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	svc := absent(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		s := initialized(t, svc)
		s.send(string(line))
		s.send(`{"jsonrpc":"2.0","id":"` + followUpID + `","method":"tools/list"}`)
		if res := s.await(t, followUpID); len(res.Result.Tools) == 0 {
			t.Fatalf("after %q, tools/list answered %+v", line, res)
		}
	})
}

// absent is a client of a server that is not there: every call fails at
// once, as unavailable.
func absent(tb testing.TB) *client.Client {
	c, err := client.New("unix://"+filepath.Join(tb.TempDir(), "absent.sock"), "")
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// initialized starts a server over svc and goes through MCP's handshake.
func initialized(t *testing.T, svc mcpserver.Service) *served {
	s := startServer(t, mcpserver.New(svc, "test", nil))
	s.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}`)
	s.await(t, float64(0))
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// served is a server running over pipes: send queues lines for its
// stdin, and lines carries what it writes to stdout.
type served struct {
	queue chan string
	lines chan []byte
}

type answer struct {
	ID     any `json:"id"`
	Result struct {
		Tools []json.RawMessage `json:"tools"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startServer runs srv over mcpserver.Transport on pipes until the test
// ends.
func startServer(t *testing.T, srv *mcp.Server) *served {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(ctx, mcpserver.Transport(inR, outW))
		outW.Close()
	}()
	s := &served{queue: make(chan string, 16), lines: make(chan []byte, 64)}
	// One writer, in order, apart from the test: the server may be busy
	// writing what the test has not read yet.
	go func() {
		for line := range s.queue {
			if _, err := io.WriteString(inW, line+"\n"); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, mcpserver.MaxLine)
		for sc.Scan() {
			s.lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	t.Cleanup(func() {
		close(s.queue)
		cancel()
		inW.Close()
		outR.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the server did not end with its input")
		}
	})
	return s
}

func (s *served) send(line string) { s.queue <- line }

// await reads the server's output until the answer to id; every line must
// be JSON.
func (s *served) await(t *testing.T, id any) answer {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("the server ended its output before answering %v", id)
			}
			var a answer
			if err := json.Unmarshal(line, &a); err != nil {
				t.Fatalf("the server wrote %q: %v", line, err)
			}
			if a.ID == id {
				return a
			}
		case <-timeout:
			t.Fatalf("no answer to %v", id)
		}
	}
}

// TestRefusals: what the server cannot take is answered with the JSON-RPC
// error the spec names, carrying the request's ID when it has one, and
// the session goes on. An unknown tool is the SDK's invalid params.
func TestRefusals(t *testing.T) {
	s := initialized(t, absent(t))
	for _, c := range []struct {
		line string
		id   any
		code int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`, float64(1), -32602},
		{`not json`, nil, -32700},
		{`{"jsonrpc":"1.0","id":"old","method":"ping"}`, "old", -32600},
		{`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`, nil, -32600},
		{`{"jsonrpc":"2.0","id":3,"method":"ping"} trailing`, nil, -32700},
	} {
		s.send(c.line)
		if a := s.await(t, c.id); a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s: answered %+v, want error %d", c.line, a, c.code)
		}
	}
	s.send(`{"jsonrpc":"2.0","id":"last","method":"tools/list"}`)
	if a := s.await(t, "last"); len(a.Result.Tools) == 0 {
		t.Errorf("tools/list after the refusals: %+v", a)
	}
}
