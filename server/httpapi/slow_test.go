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
// an error if none came within limit.
func trickle(addr, method, path, key string, n int, every, limit time.Duration) (slowAnswer, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return slowAnswer{}, err
	}
	defer c.Close()
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
	stop := make(chan struct{})
	defer close(stop)
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
			case <-stop:
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
		a, err := trickle(addr, "POST", "/v1/sandboxes", "t0ken", n, 500*time.Millisecond, 20*time.Second)
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
	a, err := trickle(addr, "POST", "/v1/sandboxes", "", 1000, 500*time.Millisecond, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusUnauthorized || a.err.Code != api.CodeUnauthorized || a.after > 500*time.Millisecond {
		t.Errorf("without a token: %+v, want a 401 at once", a)
	}
}
