package branch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/sandbox"
)

func report(b *testing.B, prefix string, samples []time.Duration) {
	s := series.Series{Samples: samples}
	b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, prefix+"p99-ms")
}

// benchSetup stands for installing dependencies and warming caches: a
// second of work and 20 MB written outside the repository.
const benchSetup = "head -c 20000000 /dev/urandom > /tmp/deps && sleep 1"

// BenchmarkFanout: set up once, checkpoint, and fork N sandboxes from it
// (all forked at once) until every one is ready, against N fresh
// sandboxes each copying the repository in and running the set-up, one
// after another, in the same run.
func BenchmarkFanout(b *testing.B) {
	c := newCoordinator(b)
	repo := gitRepo(b, repoFiles(goodLib))
	ctx := context.Background()
	o := Options{Repo: repo, Mode: Split, Setup: benchSetup, SetupTimeout: time.Minute}
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var fan, seq, setup []time.Duration
			for range b.N {
				r, err := c.newRun(ctx, o)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				snap, err := c.setup(ctx, r, o)
				if err != nil {
					b.Fatal(err)
				}
				setup = append(setup, time.Since(t0))
				ids := make([]string, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						var sb *sandbox.Sandbox
						if sb, errs[i] = c.Service.Restore(ctx, snap, sandbox.RestoreOptions{}); errs[i] == nil {
							ids[i] = sb.ID
						}
					})
				}
				wg.Wait()
				fan = append(fan, time.Since(t0))
				for i := range n {
					if errs[i] != nil {
						b.Fatal(errs[i])
					}
					c.Service.Remove(ctx, ids[i], true)
				}
				t0 = time.Now()
				for range n {
					sb, err := c.prepare(ctx, r, o)
					if err != nil {
						b.Fatal(err)
					}
					ids = append(ids, sb)
				}
				seq = append(seq, time.Since(t0))
				for _, id := range ids[n:] {
					c.Service.Remove(ctx, id, true)
				}
			}
			report(b, "fanout-", fan)
			report(b, "sequential-", seq)
			report(b, "setup-", setup)
		})
	}
}

// BenchmarkMergeQueue is the merge queue's time per merged branch: four
// split branches on different files, each merge followed by CI in a
// fresh fork of the set-up.
func BenchmarkMergeQueue(b *testing.B) {
	c := newCoordinator(b)
	repo := gitRepo(b, repoFiles(goodLib))
	o := options(repo, Split)
	for i := range 4 {
		o.Tasks = append(o.Tasks, fmt.Sprintf("do: printf '. ./lib.sh; greet\\n' > cmd/new%d.sh", i))
	}
	o.Agent = agents(doAgent)
	ctx := context.Background()
	r, err := c.Fanout(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	var per []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := c.Merge(ctx, r.ID, MergeOptions{}); err != nil {
			b.Fatal(err)
		}
		per = append(per, time.Since(t0)/4)
	}
	b.StopTimer()
	ss, _ := c.Store.Steps(ctx, r.ID)
	if merged := len(kinds(ss, "merged")); merged != 4*b.N {
		b.Fatalf("merged %d of %d", merged, 4*b.N)
	}
	report(b, "per-branch-", per)
}
