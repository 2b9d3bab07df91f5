package cli

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
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// TestServeSlowBodies replays the hostile run's slow bodies against a
// real smolvm serve with 2 slots and a queue of 1: tenant a's three bodies
// at 2 bytes a second hold a's share (one running, one waiting) and the
// third gets 429 at once; tenant b and the admin are served at once on
// both APIs meanwhile; a slow body without a key gets its 401 at once on
// both; a's bodies are cut at --body-timeout with a JSON 408; and a
// request line net/http cannot parse gets a JSON 400.
func TestServeSlowBodies(t *testing.T) {
	env := testmgr.New(t)
	srv := testserve.Start(t, env.Dir, env.GuestBinary, "--max-in-flight", "2", "--max-queue", "1", "--body-timeout", "3s")
	addr := strings.TrimPrefix(srv.URL, "http://")
	keys := map[string]string{}
	for _, name := range []string{"a", "b"} {
		if code, body := apiCall(srv, "POST", "/v1/tenants", `{"name":"`+name+`"}`); code != http.StatusCreated {
			t.Fatalf("tenant %s: %d %s", name, code, body)
		}
		code, body := apiCall(srv, "POST", "/v1/tenants/"+name+"/keys", "")
		var k api.NewKey
		if code != http.StatusCreated || json.Unmarshal(body, &k) != nil {
			t.Fatalf("key of %s: %d %s", name, code, body)
		}
		keys[name] = k.Key
	}
	bearer := func(key string) http.Header {
		if key == "" {
			return http.Header{}
		}
		return http.Header{"Authorization": {"Bearer " + key}}
	}
	type slow struct {
		a   testserve.Answer
		err error
	}
	answers := make(chan slow, 3)
	for range 3 {
		go func() {
			a, err := testserve.Trickle(addr, "POST", "/v1/sandboxes", bearer(keys["a"]), 1000, 500*time.Millisecond, time.Minute, nil)
			answers <- slow{a, err}
		}()
	}
	first := <-answers
	if first.err != nil || first.a.Status != http.StatusTooManyRequests || first.a.After > 2*time.Second {
		t.Fatalf("a's third slow body: %+v %v, want 429 at once", first.a, first.err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, c := range []struct{ who, key, path string }{
		{"b", keys["b"], "/v1/sandboxes"}, {"b on E2B", keys["b"], "/v2/sandboxes"}, {"the admin", srv.Token, "/v1/sandboxes"},
	} {
		req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
		req.Header = bearer(c.key)
		req.Header.Set("X-API-KEY", c.key)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.who, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > 2*time.Second {
			t.Errorf("%s while a's slow bodies run: %d after %v, want 200 at once", c.who, resp.StatusCode, time.Since(start))
		}
	}
	for _, path := range []string{"/v1/sandboxes", "/sandboxes"} {
		a, err := testserve.Trickle(addr, "POST", path, nil, 1000, 500*time.Millisecond, time.Minute, nil)
		if err != nil || a.Status != http.StatusUnauthorized || a.After > 2*time.Second {
			t.Errorf("a slow body to %s without a key: %+v %v, want 401 at once", path, a, err)
		}
	}
	for range 2 {
		s := <-answers
		var e api.Error
		json.Unmarshal(s.a.Body, &e)
		if s.err != nil || s.a.Status != http.StatusRequestTimeout || e.Code != api.CodeTimeout || !strings.Contains(e.Message, "--body-timeout") {
			t.Errorf("a's slow body holding a slot: %+v %v, want a JSON 408", s.a, s.err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GARBAGE\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), "malformed HTTP request") {
		t.Errorf("a malformed request line: %d %v %s, want a JSON 400", resp.StatusCode, resp.Header, b)
	}
}
