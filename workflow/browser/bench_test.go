package browser_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/workflow/browser"
)

// BenchmarkBrowser times, in one run: the golden's build (browser.Start:
// boot, warm-up, checkpoint; one sample); browser new until its CDP endpoint
// answers, from a hot pool and by a plain restore, against a cold Chromium start in a sandbox until the same;
// screenshot end to end (new, page, PNG, release); and the memory of one
// more idle browser. It reports the load average beside them.
func BenchmarkBrowser(b *testing.B) {
	w := newWorld(b)
	ctx := context.Background()
	// A hot pool of the golden: copies restored ahead of time, each with
	// its network and DevTools port, which browser new claims.
	if _, err := w.mgr.CreatePool(ctx, sandbox.PoolOptions{Name: "browsers", From: browser.DefaultGolden, Hot: 1}); err != nil {
		b.Fatal(err)
	}
	var fork, hot, hotAtOnce, cold, shot bench.Series
	// A pool's copy is claimed long after its fill, as a served pool's
	// is; claimed the moment the fill returns, the first request through
	// its network path took 150-250 ms instead of 60-90 (2026-12-06,
	// quiet), so both are reported.
	const settle = time.Second
	for range b.N {
		for _, c := range []struct {
			s    *bench.Series
			wait time.Duration
		}{{&hot, settle}, {&hotAtOnce, 0}} {
			if _, err := w.mgr.FillPool(ctx, "browsers"); err != nil {
				b.Fatal(err)
			}
			time.Sleep(c.wait)
			t0 := time.Now()
			br, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial})
			if err != nil {
				b.Fatal(err)
			}
			c.s.Samples = append(c.s.Samples, time.Since(t0))
			browser.Release(ctx, w.mgr, br.ID)
		}
	}
	if err := w.mgr.RemovePool(ctx, "browsers"); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		t0 := time.Now()
		br, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial})
		if err != nil {
			b.Fatal(err)
		}
		fork.Samples = append(fork.Samples, time.Since(t0))
		browser.Release(ctx, w.mgr, br.ID)

		t0 = time.Now()
		sb, err := w.mgr.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{
			Cmd: browser.Command(), Env: []string{"HOME=/tmp"},
			Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, Ports: []sandbox.Port{{Port: browser.CDPPort}}},
		}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := browser.WaitCDP(ctx, w.mgr, sb.ID, browser.DefaultBootTimeout, w.dial); err != nil {
			b.Fatal(err)
		}
		cold.Samples = append(cold.Samples, time.Since(t0))
		w.mgr.Remove(ctx, sb.ID, true)

		t0 = time.Now()
		if _, err := browser.Capture(ctx, w.mgr, browser.DefaultGolden, browser.ScreenshotOptions{URL: pageURL("allowed.test", 1), Dial: w.dial}); err != nil {
			b.Fatal(err)
		}
		shot.Samples = append(shot.Samples, time.Since(t0))
	}
	report := func(s bench.Series, name string) {
		b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, name+"-p99-ms")
	}
	report(fork, "new")
	report(hot, "new-hot")
	report(hotAtOnce, "new-hot-at-once")
	report(cold, "cold")
	report(shot, "screenshot")
	b.ReportMetric(w.golden.Seconds(), "golden-s")

	// Memory: three idle browsers, each with one page loaded, measured
	// by the sandbox's resident memory and by the host's MemAvailable.
	const n = 3
	before := memAvailable(b)
	var resident int64
	ids := make([]string, 0, n)
	for range n {
		br, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, br.ID)
	}
	time.Sleep(2 * time.Second) // let them settle
	for _, id := range ids {
		st, err := w.mgr.Stats(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		resident += st.ResidentBytes
	}
	after := memAvailable(b)
	for _, id := range ids {
		browser.Release(ctx, w.mgr, id)
	}
	b.ReportMetric(float64(resident)/n/(1<<20), "idle-resident-MiB")
	b.ReportMetric(float64(before-after)/n/(1<<20), "idle-host-MiB")
	reportLoad(b)
}

// reportLoad reports the one-minute load average, which every figure must
// be read beside on a shared machine.
func reportLoad(b *testing.B) {
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		load, _ := strconv.ParseFloat(strings.Fields(string(l))[0], 64)
		b.ReportMetric(load, "load1")
	}
}

// memAvailable reads the host's MemAvailable, in bytes.
func memAvailable(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// BenchmarkBrowserRun times what a user's browser run waits for, step by
// step, in one run: POST /v1/browsers claiming a hot copy until its CDP
// endpoint answers (fork), Playwright's connectOverCDP (connect), the
// navigation of the page every browser starts with to a small page
// (goto), and the first screenshot; the run end to end (total: fork to
// screenshot). Apart: the same page's second navigation (another path on
// the same host) and screenshot (goto2, screenshot2), what is left once
// each has been done, so goto less goto2 is the first one's own cost (a
// DNS lookup through the policy and a new connection among it); a new
// page's creation (newPage), which a run that opens another page pays;
// and on the same browser a second WebSocket's
// open and its CDP round trips (Browser.getVersion), which no page work
// slows: what the path to DevTools costs per message. Playwright runs in
// one node process for every run (sdk/browser-test/bench.mjs), so node's
// start-up is in no figure.
func BenchmarkBrowserRun(b *testing.B) {
	w := newWorld(b)
	node, dir := playwrightCore(b)
	ctx := context.Background()
	if _, err := w.mgr.CreatePool(ctx, sandbox.PoolOptions{Name: "browsers", From: browser.DefaultGolden, Hot: 1}); err != nil {
		b.Fatal(err)
	}
	defer w.mgr.RemovePool(context.WithoutCancel(ctx), "browsers")
	api := serveAPI(b, w)

	pw := exec.Command("nsenter", "--net="+w.net.HostNS, node, "bench.mjs")
	pw.Dir, pw.Stderr = dir, os.Stderr
	in, err := pw.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := pw.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := pw.Start(); err != nil {
		b.Fatal(err)
	}
	defer pw.Wait()
	defer in.Close()
	out := bufio.NewScanner(outPipe)

	steps := []string{"fork", "connect", "goto", "screenshot", "total", "goto2", "screenshot2", "newPage", "ws-open", "cdp-rtt"}
	series := map[string]*bench.Series{}
	for _, s := range steps {
		series[s] = &bench.Series{Name: s}
	}
	for range b.N {
		if _, err := w.mgr.FillPool(ctx, "browsers"); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // as a served pool's copy has settled (see BenchmarkBrowser)
		t0 := time.Now()
		var br browser.Browser
		if err := api.do(ctx, http.MethodPost, "/v1/browsers", http.StatusCreated, &br); err != nil {
			b.Fatal(err)
		}
		fork := time.Since(t0)
		line, _ := json.Marshal(map[string]string{"cdp": br.CDP, "url": pageURL("allowed.test", 1)})
		if _, err := in.Write(append(line, '\n')); err != nil {
			b.Fatal(err)
		}
		if !out.Scan() {
			b.Fatalf("playwright: %v", out.Err())
		}
		var ms map[string]float64
		if err := json.Unmarshal(out.Bytes(), &ms); err != nil {
			b.Fatalf("playwright: %v: %s", err, out.Bytes())
		}
		if ms["bytes"] == 0 {
			b.Fatalf("playwright: no screenshot: %s", out.Bytes())
		}
		open, rtt, err := browser.RoundTrips(ctx, br.CDP, w.dial, 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := api.do(ctx, http.MethodDelete, "/v1/browsers/"+br.ID, http.StatusNoContent, nil); err != nil {
			b.Fatal(err)
		}
		series["ws-open"].Samples = append(series["ws-open"].Samples, open)
		series["cdp-rtt"].Samples = append(series["cdp-rtt"].Samples, rtt...)
		series["fork"].Samples = append(series["fork"].Samples, fork)
		d := func(step string) time.Duration { return time.Duration(ms[step] * float64(time.Millisecond)) }
		series["total"].Samples = append(series["total"].Samples, fork+d("connect")+d("goto")+d("screenshot"))
		for _, s := range []string{"connect", "goto", "screenshot", "goto2", "screenshot2", "newPage"} {
			series[s].Samples = append(series[s].Samples, d(s))
		}
	}
	for _, s := range steps {
		b.ReportMetric(float64(series[s].Quantile(0.5).Microseconds())/1000, s+"-p50-ms")
		b.ReportMetric(float64(series[s].Quantile(0.99).Microseconds())/1000, s+"-p99-ms")
	}
	reportLoad(b)
}

// apiClient speaks to an in-process smolvm serve API over its Unix socket.
type apiClient struct {
	hc    *http.Client
	token string
}

// serveAPI serves the HTTP API for w's Manager on a Unix socket.
func serveAPI(b *testing.B, w *world) *apiClient {
	sock := filepath.Join(b.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	const token = "bench"
	hs := &http.Server{Handler: httpapi.New(httpapi.Options{Manager: w.mgr, Token: token, TempDir: b.TempDir()})}
	go hs.Serve(ln)
	b.Cleanup(func() { hs.Close() })
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	return &apiClient{hc: &http.Client{Transport: &http.Transport{DialContext: dial}}, token: token}
}

// do sends a bodyless request and decodes the answer into out, if given.
func (c *apiClient) do(ctx context.Context, method, path string, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://smolvm"+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}
