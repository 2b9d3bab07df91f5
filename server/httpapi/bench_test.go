package httpapi_test

import (
	"context"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
)

// The benchmarks drive a real server over a Unix socket with the Go
// client, on the same machine, and report p50/p99 (cmd/smolvm/bench).

func report(b *testing.B, prefix string, samples []time.Duration) {
	s := bench.Series{Samples: samples}
	b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, prefix+"p99-ms")
}

// benchServer is a real Manager served over a Unix socket, and a client.
func benchServer(b *testing.B) (*testmgr.Env, *client.Client) {
	env := testmgr.New(b)
	c, stop, err := bench.StartAPI(env.Manager, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return env, c
}

// benchSandbox is benchServer with a running sandbox.
func benchSandbox(b *testing.B) (*testmgr.Env, *client.Client, *sandbox.Sandbox) {
	env, c := benchServer(b)
	sb, err := env.Manager.Create(context.Background(), sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	return env, c, sb
}

// BenchmarkExecRoundTrip: `true` through the API, and directly through
// the Manager in the same iteration, as the baseline.
func BenchmarkExecRoundTrip(b *testing.B) {
	env, c, sb := benchSandbox(b)
	ctx := context.Background()
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
// once through the API, then 100 directly; one iteration is one round of
// each.
func BenchmarkConcurrentExec100(b *testing.B) {
	env, c, sb := benchSandbox(b)
	ctx := context.Background()
	var viaAPI, direct []time.Duration
	var apiWall, directWall time.Duration
	for b.Loop() {
		lat, w, err := bench.ConcurrentExecs(ctx, c.Exec, sb.ID, 100)
		if err != nil {
			b.Fatal(err)
		}
		viaAPI, apiWall = append(viaAPI, lat...), apiWall+w
		if lat, w, err = bench.ConcurrentExecs(ctx, env.Manager.Exec, sb.ID, 100); err != nil {
			b.Fatal(err)
		}
		direct, directWall = append(direct, lat...), directWall+w
	}
	report(b, "api-", viaAPI)
	report(b, "direct-", direct)
	b.ReportMetric(float64(len(viaAPI))/apiWall.Seconds(), "api-execs/s")
	b.ReportMetric(float64(len(direct))/directWall.Seconds(), "direct-execs/s")
}

// BenchmarkCreate: create and start a sandbox through the API.
func BenchmarkCreate(b *testing.B) {
	_, c := benchServer(b)
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

// BenchmarkCreateFromPool: create through the API from a warm pool, which
// is refilled (untimed) after each take.
func BenchmarkCreateFromPool(b *testing.B) {
	_, c := benchServer(b)
	ctx := context.Background()
	if _, err := c.CreatePool(ctx, api.PoolRequest{Name: "warm", Size: 1, Fill: true}); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		t := time.Now()
		sb, err := c.Create(ctx, sandbox.CreateOptions{Pool: "warm", Start: true, Config: sandbox.Config{TTL: sandbox.DefaultTTL}})
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t))
		b.StopTimer()
		if err := c.Remove(ctx, sb.ID, true); err != nil {
			b.Fatal(err)
		}
		if _, err := c.FillPool(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	report(b, "", samples)
}
