package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/testserve"
)

// slowAnswer is what a client trickling its body got back, its error
// decoded.
type slowAnswer struct {
	testserve.Answer
	err api.Error
}

// trickle is testserve.Trickle with key as the bearer token ("" none).
func trickle(addr, method, path, key string, n int, every, limit time.Duration, stop <-chan struct{}) (slowAnswer, error) {
	hdr := http.Header{}
	if key != "" {
		hdr.Set("Authorization", "Bearer "+key)
	}
	a, err := testserve.Trickle(addr, method, path, hdr, n, every, limit, stop)
	sa := slowAnswer{Answer: a}
	json.Unmarshal(a.Body, &sa.err)
	return sa, err
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
		if a.Status != http.StatusRequestTimeout || a.err.Code != api.CodeTimeout || !strings.Contains(a.err.Message, "too slow") || !a.Close {
			t.Errorf("length %d: %+v, want a JSON 408 and the connection closed", n, a)
		}
		// 1 s, and 10 ms per byte (100 B/s) of the few that came.
		if a.After < time.Second || a.After > 5*time.Second {
			t.Errorf("length %d: cut after %v, want about 1s", n, a.After)
		}
	}
	a, err := trickle(addr, "POST", "/v1/sandboxes", "", 1000, 500*time.Millisecond, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusUnauthorized || a.err.Code != api.CodeUnauthorized || a.After > 500*time.Millisecond {
		t.Errorf("without a token: %+v, want a 401 at once", a)
	}
}

// TestSlowBodiesFair: tenant a sends more slow bodies than there are
// slots, to a server that runs 4 requests at once and queues 4: a holds
// its share (2 running, 2 waiting), the rest of its requests get 429 at
// once, and tenant b, the admin and a caller without a key are answered
// at once all the while.
func TestSlowBodiesFair(t *testing.T) {
	tf := withTenants(t, newFakeFixture(t, func(o *httpapi.Options) {
		o.MaxInFlight, o.MaxQueue, o.BodyTimeout = 4, 4, time.Minute
	}))
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
			if a.Status != http.StatusTooManyRequests || a.err.Code != api.CodeBusy || !strings.Contains(a.err.Message, "for this tenant") {
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
	if err != nil || a.Status != http.StatusUnauthorized || a.After > 2*time.Second {
		t.Errorf("a slow body without a key: %+v %v, want a 401 at once", a, err)
	}
	select {
	case a := <-answers:
		t.Errorf("a slow body holding a slot was answered: %+v", a)
	default:
	}
}
