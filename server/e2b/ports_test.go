package e2b

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"smolvm.dev/smolvm/sandbox"
)

//go:embed testdata/portserver.py
var portServer string

// portFixture is a real smolvm serve with one E2B sandbox (no network)
// whose servers listen on 8000 (127.0.0.1) and 8080 (0.0.0.0) inside.
type portFixture struct {
	t    *testing.T
	s    *server
	base string // the server's root URL
	sb   sandboxJSON
	hc   *http.Client // sends every request to the server, whatever the host
}

func newPortFixture(t *testing.T) *portFixture {
	s := smolvmServe(t)
	f := &portFixture{t: t, s: s, base: strings.TrimSuffix(s.URL, "/e2b")}
	f.hc = dialsOnly(f.base)
	code, body := f.do("POST", s.URL+"/sandboxes", `{"templateID":"base","timeout":300}`, "X-API-KEY", s.Key)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &f.sb); err != nil {
		t.Fatal(err)
	}
	if f.sb.Domain != testDomain || f.sb.TrafficAccessToken == "" || f.sb.TrafficAccessToken == f.sb.EnvdAccessToken {
		t.Fatalf("create reply: %s", body)
	}
	for _, a := range [][]string{{"8000", "127.0.0.1"}, {"8080", "0.0.0.0"}} {
		exit, err := s.env.Manager.Exec(context.Background(), f.sb.SandboxID, sandbox.Process{
			Args: []string{"sh", "-c", `python3 -c "$0" "$1" "$2" >/tmp/server.log 2>&1 &`, portServer, a[0], a[1]},
		}, sandbox.Stdio{})
		if err != nil || exit.Code != 0 {
			t.Fatalf("start server: %v %+v", err, exit)
		}
	}
	for _, p := range []string{"8000", "8080"} {
		for deadline := time.Now().Add(20 * time.Second); ; {
			code, body := f.host(p, "GET", "/", "", "E2B-Traffic-Access-Token", f.sb.TrafficAccessToken)
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %s never answered: %d %s", p, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return f
}

// dialsOnly returns a client that sends every request to the server at
// base, whatever its host: PORT-ID.testDomain resolves nowhere.
func dialsOnly(base string) *http.Client {
	u, _ := url.Parse(base)
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", u.Host)
	}}}
}

// do sends a request with header pairs hdr and returns status and body.
func (f *portFixture) do(method, u, body string, hdr ...string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, b := exchange(f.t, f.hc, req)
	return resp.StatusCode, b
}

// exchange sends req with hc and returns the response and its body.
func exchange(t testing.TB, hc *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// hostName is E2B's getHost(port) for the fixture's sandbox.
func (f *portFixture) hostName(port string) string {
	return port + "-" + f.sb.SandboxID + "." + testDomain
}

// host sends a request to port by name (PORT-ID.DOMAIN).
func (f *portFixture) host(port, method, path, body string, hdr ...string) (int, []byte) {
	return f.do(method, "http://"+f.hostName(port)+path, body, hdr...)
}

// echoed is what portserver.py answers a GET with.
type echoed struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

// echo decodes what portserver.py answered, its header names in
// canonical form.
func (f *portFixture) echo(code int, body []byte) echoed {
	f.t.Helper()
	var e echoed
	if code != http.StatusOK || json.Unmarshal(body, &e) != nil {
		f.t.Fatalf("%d %s", code, body)
	}
	h := map[string]string{}
	for k, v := range e.Headers {
		h[http.CanonicalHeaderKey(k)] = v
	}
	e.Headers = h
	return e
}

// TestPorts reaches servers inside a sandbox without a network through
// every route (by name, by path, by E2B's port header), over HTTP and
// WebSocket, with each route's credentials, and checks the refusals.
func TestPorts(t *testing.T) {
	f := newPortFixture(t)
	id, traffic, envd, key := f.sb.SandboxID, f.sb.TrafficAccessToken, f.sb.EnvdAccessToken, f.s.Key

	t.Run("by name", func(t *testing.T) {
		e := f.echo(f.host("8000", "GET", "/a/b/?q=1%202", "", "E2B-Traffic-Access-Token", traffic, "X-Custom", "kept"))
		if e.Path != "/a/b/?q=1%202" || e.Headers["Host"] != f.hostName("8000") || e.Headers["X-Custom"] != "kept" {
			t.Fatalf("forwarded as %+v", e)
		}
		if _, leaked := e.Headers["E2b-Traffic-Access-Token"]; leaked {
			t.Fatalf("the traffic token reached the sandbox: %+v", e.Headers)
		}
		// Each credential opens it: envd's token, the API key; 0.0.0.0 too.
		e = f.echo(f.host("8080", "DELETE", "/x", "", "X-Access-Token", envd))
		if _, leaked := e.Headers["X-Access-Token"]; leaked || e.Method != "DELETE" {
			t.Fatalf("forwarded as %+v", e)
		}
		e = f.echo(f.host("8000", "GET", "/", "", "Authorization", "Bearer "+key))
		if _, leaked := e.Headers["Authorization"]; leaked {
			t.Fatalf("the API token reached the sandbox: %+v", e.Headers)
		}
		big := strings.Repeat("0123456789", 300_000)
		if code, body := f.host("8000", "POST", "/up", big, "E2B-Traffic-Access-Token", traffic); code != 200 || string(body) != big {
			t.Fatalf("POST echo: %d, %d bytes", code, len(body))
		}
	})
	t.Run("by path", func(t *testing.T) {
		e := f.echo(f.do("GET", f.base+"/v1/sandboxes/"+id+"/ports/8080/static/?x=1", "", "Authorization", "Bearer "+key))
		if e.Path != "/static/?x=1" {
			t.Fatalf("forwarded as %+v", e)
		}
		if code, body := f.do("PUT", f.base+"/v1/sandboxes/"+id+"/ports/8000/", "put body", "X-API-KEY", key); code != 200 || string(body) != "put body" {
			t.Fatalf("PUT: %d %s", code, body)
		}
	})
	t.Run("by E2B's port header", func(t *testing.T) {
		e := f.echo(f.do("GET", f.s.URL+"/contexts", "", "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000", "E2B-Traffic-Access-Token", traffic))
		if e.Path != "/contexts" {
			t.Fatalf("forwarded as %+v", e)
		}
	})
	t.Run("streams", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+f.hostName("8000")+"/stream", nil)
		req.Header.Set("E2B-Traffic-Access-Token", traffic)
		resp, err := f.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		// "second" comes only after /release: the first line must arrive
		// while the server still holds the response open.
		if line, err := r.ReadString('\n'); line != "first\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		if code, body := f.host("8000", "GET", "/release", "", "E2B-Traffic-Access-Token", traffic); code != 200 {
			t.Fatalf("release: %d %s", code, body)
		}
		if rest, err := io.ReadAll(r); string(rest) != "second\n" {
			t.Fatalf("rest %q, %v", rest, err)
		}
	})
	t.Run("full duplex", func(t *testing.T) {
		// The answer starts before the body is sent: the proxy must keep
		// reading the body after the answer's headers (a bidirectional
		// stream, and the last read of any body that races its answer).
		lines := []string{"one\n", "two\n", "three\n"}
		pr, pw := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A client stuck sending waits for its body: end it at the timeout.
		context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+f.hostName("8000")+"/duplex", pr)
		req.ContentLength = int64(len(strings.Join(lines, "")))
		req.Header.Set("E2B-Traffic-Access-Token", traffic)
		go pw.Write([]byte(lines[0]))
		resp, err := f.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for i, want := range lines {
			if i > 0 {
				go pw.Write([]byte(want))
			}
			if got, err := r.ReadString('\n'); got != want {
				t.Fatalf("line %d: %q, %v", i, got, err)
			}
		}
		pw.Close()
	})
	t.Run("websocket", func(t *testing.T) {
		for _, c := range []struct {
			url string
			hdr http.Header
		}{
			{"ws://" + f.hostName("8000") + "/ws", http.Header{"E2B-Traffic-Access-Token": {traffic}}},
			{strings.Replace(f.base, "http", "ws", 1) + "/v1/sandboxes/" + id + "/ports/8080/ws", http.Header{"Authorization": {"Bearer " + key}}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			ws, _, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{HTTPClient: f.hc, HTTPHeader: c.hdr})
			if err != nil {
				cancel()
				t.Fatalf("%s: %v", c.url, err)
			}
			for i, msg := range []string{"hello", strings.Repeat("x", 5000)} {
				if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				_, got, err := ws.Read(ctx)
				if err != nil || string(got) != "echo:"+msg {
					t.Fatalf("%s message %d: %.40q, %v", c.url, i, got, err)
				}
			}
			ws.Close(websocket.StatusNormalClosure, "")
			cancel()
		}
	})
	t.Run("refused", func(t *testing.T) {
		tok := []string{"E2B-Traffic-Access-Token", traffic}
		for _, c := range []struct {
			what   string
			status int
			want   string
			send   func() (int, []byte)
		}{
			{"no token", 401, "missing or invalid access token", func() (int, []byte) { return f.host("8000", "GET", "/", "") }},
			{"envd's token as the traffic token", 401, "invalid access token", func() (int, []byte) {
				return f.host("8000", "GET", "/", "", "E2B-Traffic-Access-Token", envd)
			}},
			{"a wrong API key", 401, "missing or invalid access token", func() (int, []byte) { return f.host("8000", "GET", "/", "", "Authorization", "Bearer nope") }},
			{"a wrong API key beside the traffic token", 401, "missing or invalid access token", func() (int, []byte) {
				return f.host("8000", "GET", "/", "", "E2B-Traffic-Access-Token", traffic, "X-API-KEY", "nope")
			}},
			{"the path form with an E2B token", 401, "token", func() (int, []byte) {
				return f.do("GET", f.base+"/v1/sandboxes/"+id+"/ports/8000/", "", tok...)
			}},
			{"a port nothing listens on", 502, "nothing answers on port 8001", func() (int, []byte) { return f.host("8001", "GET", "/", "", tok...) }},
			{"a port nothing listens on, by path", 502, "nothing answers on port 8001", func() (int, []byte) {
				return f.do("GET", f.base+"/v1/sandboxes/"+id+"/ports/8001/", "", "X-API-KEY", key)
			}},
			{"port 0", 400, "port", func() (int, []byte) { return f.host("0", "GET", "/", "", tok...) }},
			{"port 70000, by path", 400, "port", func() (int, []byte) {
				return f.do("GET", f.base+"/v1/sandboxes/"+id+"/ports/70000/", "", "X-API-KEY", key)
			}},
			{"port 70000, by header", 400, "port", func() (int, []byte) {
				return f.do("POST", f.s.URL+"/filesystem.Filesystem/Stat", "{}", "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "70000", "X-Access-Token", envd, "Content-Type", "application/json")
			}},
			{"a host without a port", 400, "PORT-SANDBOXID", func() (int, []byte) {
				return f.do("GET", "http://"+id+"."+testDomain+"/", "", tok...)
			}},
			{"another sandbox's token", 401, "missing or invalid access token", func() (int, []byte) {
				return f.do("GET", "http://8000-abcdefabcdef."+testDomain+"/", "", tok...)
			}},
		} {
			code, body := c.send()
			if code != c.status || !strings.Contains(string(body), c.want) {
				t.Errorf("%s: %d %s, want %d with %q", c.what, code, body, c.status, c.want)
			}
		}
		// A sandbox that is not running: E2B's proxy answers 502.
		if _, err := f.s.env.Manager.Stop(context.Background(), id, time.Second); err != nil {
			t.Fatal(err)
		}
		if code, body := f.host("8000", "GET", "/", "", tok...); code != 502 || !strings.Contains(string(body), "not running") {
			t.Fatalf("stopped sandbox by name: %d %s", code, body)
		}
		if code, body := f.do("GET", f.base+"/v1/sandboxes/"+id+"/ports/8000/", "", "X-API-KEY", key); code != 502 || !strings.Contains(string(body), "stopped") {
			t.Fatalf("stopped sandbox by path: %d %s", code, body)
		}
	})
}
