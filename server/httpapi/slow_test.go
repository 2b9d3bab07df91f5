package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/server/httpapi"
)

// slowAnswer is what a client trickling its body got back.
type slowAnswer struct {
	status int
	err    api.Error
	close  bool          // Connection: close
	after  time.Duration // from the request's start
}

// trickle sends a request on a connection of its own, its head at once
// and then its body (of length n, or chunked for -1) one byte per every,
// reading the answer meanwhile, as curl does. It returns the answer, or
// an error if none came within limit or before stop closed.
func trickle(addr, method, path, key string, n int, every, limit time.Duration, stop <-chan struct{}) (slowAnswer, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return slowAnswer{}, err
	}
	defer c.Close()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-stop:
			c.Close()
		case <-finished:
		}
	}()
	start := time.Now()
	c.SetDeadline(start.Add(limit))
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: smolvm\r\nContent-Type: application/json\r\n", method, path)
	if key != "" {
		head += "Authorization: Bearer " + key + "\r\n"
	}
	if n >= 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", n)
	} else {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	}
	if _, err := io.WriteString(c, head); err != nil {
		return slowAnswer{}, err
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; n < 0 || i < n; i++ {
			b := "x"
			if n < 0 {
				b = "1\r\nx\r\n"
			}
			if _, err := io.WriteString(c, b); err != nil {
				return
			}
			select {
			case <-finished:
				return
			case <-t.C:
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return slowAnswer{}, fmt.Errorf("no answer after %v: %w", time.Since(start), err)
	}
	defer resp.Body.Close()
	a := slowAnswer{status: resp.StatusCode, close: resp.Close, after: time.Since(start)}
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &a.err)
	return a, nil
}

// TestSlowBodyCut: a body that trickles in (2 bytes a second) is cut at
// the server's body deadline, declared or chunked, with a JSON 408 that
// says why, and the connection closes; the same body without a token
// gets its 401 at once, not at the deadline. Neither reaches a handler:
// the server has no Manager.
func TestSlowBodyCut(t *testing.T) {
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Token: "t0ken", BodyTimeout: time.Second, MinBodyRate: 100}))
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, n := range []int{1000, -1} {
		a, err := trickle(addr, "POST", "/v1/sandboxes", "t0ken", n, 500*time.Millisecond, 20*time.Second, nil)
		if err != nil {
			t.Fatalf("length %d: %v", n, err)
		}
		if a.status != http.StatusRequestTimeout || a.err.Code != api.CodeTimeout || !strings.Contains(a.err.Message, "too slow") || !a.close {
			t.Errorf("length %d: %+v, want a JSON 408 and the connection closed", n, a)
		}
		// 1 s, and 10 ms per byte (100 B/s) of the few that came.
		if a.after < time.Second || a.after > 5*time.Second {
			t.Errorf("length %d: cut after %v, want about 1s", n, a.after)
		}
	}
	a, err := trickle(addr, "POST", "/v1/sandboxes", "", 1000, 500*time.Millisecond, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusUnauthorized || a.err.Code != api.CodeUnauthorized || a.after > 500*time.Millisecond {
		t.Errorf("without a token: %+v, want a 401 at once", a)
	}
}

// TestSlowBodiesFair: tenant a sends more slow bodies than there are
// slots, to a server that runs 4 requests at once and queues 4: a holds
// its share (2 running, 2 waiting), the rest of its requests get 429 at
// once, and tenant b, the admin and a caller without a key are answered
// at once all the while.
func TestSlowBodiesFair(t *testing.T) {
	tf := newTenantFixture(t, func(o *httpapi.Options) {
		o.MaxInFlight, o.MaxQueue, o.BodyTimeout = 4, 4, time.Minute
	})
	addr := strings.TrimPrefix(tf.url, "http://")
	stop := make(chan struct{})
	answers := make(chan slowAnswer, 8)
	held := make(chan struct{}, 8)
	for range 8 {
		go func() {
			a, err := trickle(addr, "POST", "/v1/sandboxes", tf.keys["a"], 1000, time.Second, time.Minute, stop)
			if err != nil {
				held <- struct{}{}
				return
			}
			answers <- a
		}()
	}
	defer func() { // the holders end with their connections
		close(stop)
		for range 4 {
			select {
			case <-held:
			case <-answers:
			case <-time.After(30 * time.Second):
				return
			}
		}
	}()
	for range 4 {
		select {
		case a := <-answers:
			if a.status != http.StatusTooManyRequests || a.err.Code != api.CodeBusy || !strings.Contains(a.err.Message, "for this tenant") {
				t.Fatalf("a's slow body past its share: %+v, want 429 naming the tenant's share", a)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a's slow bodies past its share were not refused")
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	ask := func(who, key, method, path, body string) (int, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest(method, tf.url+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	for i := range 3 {
		for _, c := range []struct {
			who, key string
			want     int
		}{{"b", tf.keys["b"], 200}, {"the admin", token, 200}, {"a", tf.keys["a"], 429}} {
			if code, took := ask(c.who, c.key, "GET", "/v1/sandboxes", ""); code != c.want || took > 2*time.Second {
				t.Errorf("%s's list #%d while a's slow bodies hold its share: %d after %v, want %d at once", c.who, i, code, took, c.want)
			}
		}
	}
	a, err := trickle(addr, "POST", "/v1/sandboxes", "", 1000, time.Second, 20*time.Second, nil)
	if err != nil || a.status != http.StatusUnauthorized || a.after > 2*time.Second {
		t.Errorf("a slow body without a key: %+v %v, want a 401 at once", a, err)
	}
	select {
	case a := <-answers:
		t.Errorf("a slow body holding a slot was answered: %+v", a)
	default:
	}
}
