package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
)

// TestFlood sends 1,000 requests at once (reads, execs and creates) to a
// server over the fake runtime that runs 16 at a time and queues 64:
// every answer must be a success or a 429, the server must stay
// responsive, and every create that succeeded must be there afterwards
// (and no other).
func TestFlood(t *testing.T) {
	f := newFakeFixture(t, func(o *httpapi.Options) { o.MaxInFlight, o.MaxQueue = 16, 64 })
	f.create("target", "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1000}}

	type result struct {
		kind   string
		name   string
		status int
		err    error
	}
	results := make(chan result, 1000)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 1000 {
		var method, path, body, kind, name string
		switch {
		case i%100 == 0:
			name = fmt.Sprintf("flood-%d", i)
			method, path, body, kind = http.MethodPost, "/v1/sandboxes", `{"name":"`+name+`"}`, "create"
		case i%3 == 0:
			// An exec holds its slot a while, as a real one does: the
			// fake runtime answers everything else at once.
			method, path, body, kind = http.MethodPost, "/v1/sandboxes/target/exec", `{"args":["sleep","0.2"]}`, "exec"
		case i%3 == 1:
			method, path, kind = http.MethodGet, "/v1/sandboxes/target", "get"
		default:
			method, path, kind = http.MethodGet, "/v1/sandboxes", "list"
		}
		wg.Go(func() {
			<-start
			req, _ := http.NewRequestWithContext(ctx, method, f.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hc.Do(req)
			r := result{kind: kind, name: name, err: err}
			if err == nil {
				r.status = resp.StatusCode
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if kind == "exec" && r.status == 200 && !strings.Contains(string(b), `"exit":{"code":0}`) {
					r.err = fmt.Errorf("exec stream without a clean exit: %q", b)
				}
			}
			results <- r
		})
	}
	close(start)
	wg.Wait()
	close(results)
	counts := map[string]int{}
	created := map[string]bool{}
	for r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", r.kind, r.err)
			continue
		}
		counts[fmt.Sprintf("%s %d", r.kind, r.status)]++
		switch {
		case r.status == http.StatusTooManyRequests:
		case r.status == http.StatusOK || r.status == http.StatusCreated:
			if r.kind == "create" {
				created[r.name] = true
			}
		default:
			t.Errorf("%s: status %d", r.kind, r.status)
		}
	}
	t.Logf("answers: %v", counts)
	if counts["get 429"]+counts["list 429"]+counts["exec 429"]+counts["create 429"] == 0 {
		t.Error("no request was refused: the limiter did not act")
	}
	// Never lost state: exactly the creates that succeeded exist.
	list, err := f.c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, sb := range list {
		if strings.HasPrefix(sb.Name, "flood-") {
			have[sb.Name] = sb.State == sandbox.StateRunning
		}
	}
	for n := range created {
		if !have[n] {
			t.Errorf("create of %s answered 201, but it is not running: %v", n, have)
		}
	}
	if len(have) != len(created) {
		t.Errorf("sandboxes %v, but only %v were answered as created", have, created)
	}
	// And the server still answers at once.
	code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/target", "")
	var sb sandbox.Sandbox
	if code != 200 || json.Unmarshal(body, &sb) != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("after the flood: %d %s", code, body)
	}
}
