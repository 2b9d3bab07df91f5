package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// BenchmarkConsoleList measures the sandbox list with many sandboxes
// (SMOLVM_CONSOLE_N, default 500: created, not started, the cheapest
// real ones, and one running that is paused and resumed) in Chromium:
// from a page load to every row drawn, and from a pause or resume
// through the API to its row showing it; beside them, in the same run,
// the API alone: GET /v1/sandboxes, and the event reaching a plain
// /v1/events client. It logs p50/p99 of each, the first load's bytes,
// and the load average.
func BenchmarkConsoleList(b *testing.B) {
	testenv.Integration(b)
	testenv.NeedRoot(b)
	n := 500
	if v, err := strconv.Atoi(os.Getenv("SMOLVM_CONSOLE_N")); err == nil && v > 0 {
		n = v
	}
	env := testmgr.New(b)
	srv := testserve.Start(b, env.Dir, env.GuestBinary)
	s := &serve{Server: srv}
	tok := srv.Token
	// Eight at a time: creates are mostly the state database's and the
	// root filesystem's, not runsc's.
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				s.must(b, tok, "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"c%d","start":false,"timeout":"2h"}`, i), nil)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	var live struct{ ID string }
	s.must(b, tok, "POST", "/v1/sandboxes", `{"name":"live","cmd":["sleep","7200"],"timeout":"2h"}`, &live)
	load := loadavg()

	// The API alone, as many times as the page is measured.
	list := series.Series{Name: "GET /v1/sandboxes (API)"}
	event := series.Series{Name: "pause/resume -> event (API)"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	// pause alternates pausing and resuming the live sandbox; it leaves
	// it running once done.
	paused := false
	pause := func() string {
		op := map[bool]string{false: "pause", true: "resume"}[paused]
		s.must(b, tok, "POST", "/v1/sandboxes/"+live.ID+"/"+op, "", nil)
		paused = !paused
		return op + "d"
	}
	for b.Loop() {
		t0 := time.Now()
		var all []json.RawMessage
		s.must(b, tok, "GET", "/v1/sandboxes", "", &all)
		list.Samples = append(list.Samples, time.Since(t0))
		if len(all) != n+1 {
			b.Fatalf("listed %d sandboxes, want %d", len(all), n+1)
		}
		typ := pause()
		t1 := time.Now()
		for events.Scan() {
			if strings.Contains(events.Text(), `"id":"`+live.ID+`"`) && strings.Contains(events.Text(), typ) {
				break
			}
		}
		event.Samples = append(event.Samples, time.Since(t1))
	}
	if paused {
		pause()
	}
	r := runScript(b, map[string]any{"url": srv.URL, "admin": tok, "mode": "bench", "n": len(list.Samples), "count": n + 1, "id": live.ID})
	for _, c := range r.Checks {
		if !c.OK {
			b.Fatalf("%s: %s", c.Name, c.Detail)
		}
	}
	ms := func(name, key string) series.Series {
		var v []float64
		json.Unmarshal(r.Figures[key], &v)
		out := series.Series{Name: name}
		for _, x := range v {
			out.Samples = append(out.Samples, time.Duration(x*float64(time.Millisecond)))
		}
		return out
	}
	for _, pair := range [][2]series.Series{{ms("page load -> all rows drawn (Chromium)", "render_ms"), list}, {ms("pause/resume -> row updated (Chromium)", "update_ms"), event}} {
		for _, sr := range pair {
			b.Logf("%-42s p50 %8.1f ms  p99 %8.1f ms  (%d samples)", sr.Name, ms1(sr.Quantile(.5)), ms1(sr.Quantile(.99)), len(sr.Samples))
		}
	}
	b.Logf("%d sandboxes; first load of the list: %s bytes transferred (the list's JSON %s), DOM interactive at %s ms",
		n+1, r.Figures["list_load_bytes"], r.Figures["list_json_bytes"], r.Figures["dom_interactive_ms"])
	b.Logf("load average before: %s, after: %s", load, loadavg())
}

func ms1(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
