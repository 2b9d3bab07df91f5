package browser_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

// BenchmarkBrowser times, in one run: browser new until its CDP endpoint
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
