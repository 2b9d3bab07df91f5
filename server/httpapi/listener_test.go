package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/server/httpapi"
)

// TestMalformedRequestsAnswerJSON sends raw requests that net/http
// refuses before any handler (it answers them itself, in plain text) to a
// real listener wrapped by httpapi.Listener: each answer is the same
// status in the API's JSON error shape, and the listener still serves
// well-formed requests, their answers untouched.
func TestMalformedRequestsAnswerJSON(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: httpapi.New(httpapi.Options{Token: "t0ken"}), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 10}
	go hs.Serve(httpapi.Listener(ln, nil))
	defer hs.Close()
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"
	for _, c := range []struct {
		name, req string
		status    int
		code      string
		mention   string
	}{
		{"garbage", "GARBAGE\r\n\r\n", 400, api.CodeInvalid, "Bad Request"},
		{"no version", "GET /\r\nHost: x\r\n\r\n", 400, api.CodeInvalid, "Bad Request"},
		{"bad header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, api.CodeInvalid, "Bad Request"},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, api.CodeInvalid, "missing required Host header"},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, api.CodeInvalid, "malformed Host header"},
		{"bad header name", "GET / HTTP/1.1\r\nHost: x\r\nBad(Name): 1\r\n\r\n", 400, api.CodeInvalid, "Bad Request"},
		{"bad length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400, api.CodeInvalid, "Bad Request"},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, api.CodeUnsupported, "unsupported protocol version"},
		{"unknown coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, api.CodeUnsupported, "Unsupported transfer encoding"},
		{"headers too large", big, 431, api.CodeTooLarge, "Request Header Fields Too Large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := raw(t, ln.Addr().String(), c.req)
			var e api.Error
			if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" ||
				e.Code != c.code || !strings.Contains(e.Message, "malformed HTTP request: ") || !strings.Contains(e.Message, c.mention) {
				t.Fatalf("%d %v %q, want %d with a JSON error %s mentioning %q", resp.StatusCode, resp.Header, body, c.status, c.code, c.mention)
			}
		})
	}
	// Well-formed requests are served as before, on the same listener.
	resp, body := raw(t, ln.Addr().String(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	resp, body = raw(t, ln.Addr().String(), "GET /v1/nope HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) || resp.Header.Get("Date") == "" {
		t.Fatalf("a handler's own 401: %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

// raw sends req on a connection of its own and reads the answer.
func raw(t *testing.T, addr, req string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}
