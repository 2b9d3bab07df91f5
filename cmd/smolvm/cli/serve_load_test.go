package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// TestServeLoad makes SMOLVM_LOAD_N (default 200) sandboxes through a
// real smolvm serve, at most 20 alive at once, each running `true` and
// removed; then checks the host for leaks (leakWatch): no sandbox or
// network directory, process, mount or cgroup of them left. It logs create and exec
// p50/p99 under that load.
func TestServeLoad(t *testing.T) {
	n := 200
	if v := os.Getenv("SMOLVM_LOAD_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("SMOLVM_LOAD_N=%q: %v", v, err)
		}
	}
	const workers = 20
	env := testmgr.New(t)
	leaks := watchLeaks(t, env.Dir)
	srv := testserve.Start(t, env.Dir, env.GuestBinary)
	var (
		mu             sync.Mutex
		creates, execs []time.Duration
		fails          []string
		next           = make(chan int)
		wg             sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				code, body := apiCall(srv, "POST", "/v1/sandboxes", `{"name":"load-`+strconv.Itoa(i)+`"}`)
				created := time.Since(start)
				var sb sandbox.Sandbox
				if code != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
					mu.Lock()
					fails = append(fails, "create "+strconv.Itoa(i)+": "+strconv.Itoa(code)+" "+string(body))
					mu.Unlock()
					continue
				}
				start = time.Now()
				ecode, ebody := apiCall(srv, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"args":["true"]}`)
				ran := time.Since(start)
				rcode, rbody := apiCall(srv, "DELETE", "/v1/sandboxes/"+sb.ID+"?force=true", "")
				mu.Lock()
				creates = append(creates, created)
				if ecode != http.StatusOK || !strings.Contains(string(ebody), `"code":0`) {
					fails = append(fails, "exec "+sb.Name+": "+strconv.Itoa(ecode)+" "+string(ebody))
				} else {
					execs = append(execs, ran)
				}
				if rcode != http.StatusNoContent {
					fails = append(fails, "rm "+sb.Name+": "+strconv.Itoa(rcode)+" "+string(rbody))
				}
				mu.Unlock()
			}
		})
	}
	began := time.Now()
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(began)
	for _, f := range fails {
		t.Error(f)
	}
	c, e := bench.Series{Samples: creates}, bench.Series{Samples: execs}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d sandboxes, %d at once, in %s: create p50 %s p99 %s; exec p50 %s p99 %s; loadavg %s", n, workers, took.Round(time.Millisecond),
		c.Quantile(0.5).Round(time.Millisecond), c.Quantile(0.99).Round(time.Millisecond),
		e.Quantile(0.5).Round(time.Millisecond), e.Quantile(0.99).Round(time.Millisecond), strings.TrimSpace(string(load)))

	// Leaks: nothing of the data dir's sandboxes may remain on the host.
	if ids := listIDs(t, srv); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
	leaks.check(t, nil)
}
