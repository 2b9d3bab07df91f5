package api_test

import (
	"context"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/bench"
	"smolvm.dev/smolvm/internal/testmgr"
	"smolvm.dev/smolvm/sandbox"
)

// The benchmarks drive a real server over a Unix socket with the Go
// client, on the same machine, and report p50/p99 (internal/bench).

func report(b *testing.B, prefix string, samples []time.Duration) {
	s := bench.Series{Samples: samples}
	b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, prefix+"p99-ms")
}

// BenchmarkExecRoundTrip: `true` through the API, and directly through
// the Manager in the same iteration, as the baseline.
func BenchmarkExecRoundTrip(b *testing.B) {
	env := testmgr.New(b)
	c, stop, err := bench.StartAPI(env.Manager, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	sb, err := env.Manager.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	var viaAPI, direct []time.Duration
	for b.Loop() {
		a, d, err := bench.ExecPair(ctx, c, env.Manager, sb.ID)
		if err != nil {
			b.Fatal(err)
		}
		viaAPI, direct = append(viaAPI, a), append(direct, d)
	}
	report(b, "api-", viaAPI)
	report(b, "direct-", direct)
}

// BenchmarkConcurrentExec100: 100 streaming execs (100 lines each) at
// once through the API; one iteration is one round of 100.
func BenchmarkConcurrentExec100(b *testing.B) {
	env := testmgr.New(b)
	c, stop, err := bench.StartAPI(env.Manager, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	sb, err := env.Manager.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	var wall time.Duration
	for b.Loop() {
		lat, w, err := bench.ConcurrentExecs(ctx, c, sb.ID, 100)
		if err != nil {
			b.Fatal(err)
		}
		all, wall = append(all, lat...), wall+w
	}
	report(b, "exec-", all)
	b.ReportMetric(float64(len(all))/wall.Seconds(), "execs/s")
}

// BenchmarkCreate: create and start a sandbox through the API.
func BenchmarkCreate(b *testing.B) {
	env := testmgr.New(b)
	c, stop, err := bench.StartAPI(env.Manager, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	var samples []time.Duration
	for b.Loop() {
		d, err := bench.CreateViaAPI(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, d)
	}
	report(b, "", samples)
}
