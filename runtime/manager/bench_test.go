package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// The benchmarks pair each smolvm operation with the stock runsc CLI doing
// the same (BenchmarkStock*), so one run measures both under the same
// machine load. Each reports p50 and p99 besides the mean.

func reportQuantiles(b *testing.B, samples []time.Duration) {
	p50, p99 := quantiles(samples)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// quantiles returns the p50 and p99 of samples, in milliseconds.
func quantiles(samples []time.Duration) (float64, float64) {
	slices.Sort(samples)
	q := func(p float64) float64 {
		i := max(0, min(len(samples)-1, int(p*float64(len(samples))+0.5)-1))
		return float64(samples[i].Microseconds()) / 1000
	}
	return q(0.50), q(0.99)
}

func BenchmarkExecTrue(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		t := time.Now()
		exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
		if err != nil || exit.Code != 0 {
			b.Fatal(err, exit)
		}
		samples = append(samples, time.Since(t))
	}
	reportQuantiles(b, samples)
}

func BenchmarkColdStart(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	var samples []time.Duration
	for b.Loop() {
		t := time.Now()
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
			b.Fatal(err, exit)
		}
		samples = append(samples, time.Since(t))
		b.StopTimer()
		m.Remove(ctx, sb.ID, true)
		b.StartTimer()
	}
	reportQuantiles(b, samples)
}

func BenchmarkStockExecTrue(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	s, err := gvisor.NewStock(testenv.Runsc(b), hostRootfs(b, m), filepath.Join(m.dir, "stock"), "stock")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Delete(ctx)
	if err := s.Run(ctx); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		t := time.Now()
		if err := s.Exec(ctx, "/usr/bin/true"); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t))
	}
	reportQuantiles(b, samples)
}

func BenchmarkStockColdStart(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	rootfs := hostRootfs(b, m)
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("stock%d", i)
		s, err := gvisor.NewStock(testenv.Runsc(b), rootfs, filepath.Join(m.dir, id), id)
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		if err := s.Run(ctx); err != nil {
			b.Fatal(err)
		}
		if err := s.Exec(ctx, "/usr/bin/true"); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t))
		b.StopTimer()
		s.Delete(ctx)
		b.StartTimer()
	}
	reportQuantiles(b, samples)
}

func hostRootfs(b *testing.B, m *testManager) backend.Rootfs {
	rf, err := m.ImageRootfs(context.Background(), sandbox.DefaultImage)
	if err != nil {
		b.Fatal(err)
	}
	return rf
}

// timed runs op b.N times on a fresh result each time, timing op alone;
// undo (untimed) removes what op made.
func timed(b *testing.B, op func() (undo func())) {
	var samples []time.Duration
	for b.Loop() {
		t := time.Now()
		undo := op()
		samples = append(samples, time.Since(t))
		b.StopTimer()
		undo()
		b.StartTimer()
	}
	reportQuantiles(b, samples)
}

func BenchmarkCheckpoint(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		b.Fatal(err)
	}
	timed(b, func() func() {
		snap, err := m.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return func() { m.snaps.Remove(ctx, snap.ID, nil) }
	})
}

// withTargets runs bench twice: cold, and with a pool of n restore targets
// that refill is to fill again (untimed) after each operation.
func withTargets(b *testing.B, n int, bench func(b *testing.B, m *testManager, refill func())) {
	for _, targets := range []bool{false, true} {
		b.Run(fmt.Sprintf("targets=%t", targets), func(b *testing.B) {
			m := newManager(b)
			refill := func() {}
			if targets {
				m.filledPool(b, sandbox.PoolOptions{Name: "t", Targets: n})
				refill = func() {
					if _, err := m.FillPool(context.Background(), "t"); err != nil {
						b.Fatal(err)
					}
				}
			}
			bench(b, m, refill)
		})
	}
}

func BenchmarkRestore(b *testing.B) {
	withTargets(b, 1, func(b *testing.B, m *testManager, refill func()) {
		ctx := context.Background()
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
		if err != nil {
			b.Fatal(err)
		}
		snap, err := m.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{})
		if err != nil {
			b.Fatal(err)
		}
		timed(b, func() func() {
			cp, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return func() { m.Remove(ctx, cp.ID, true); refill() }
		})
	})
}

func BenchmarkFork(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			withTargets(b, n, func(b *testing.B, m *testManager, refill func()) {
				ctx := context.Background()
				sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
				if err != nil {
					b.Fatal(err)
				}
				timed(b, func() func() {
					copies, err := m.Fork(ctx, sb.ID, sandbox.ForkOptions{N: n})
					if err != nil {
						b.Fatal(err)
					}
					return func() {
						for _, c := range copies {
							m.Remove(ctx, c.ID, true)
						}
						refill()
					}
				})
			})
		})
	}
}

func BenchmarkCreateFromPool(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, sandbox.PoolOptions{Name: "bench", Size: 1}); err != nil {
		b.Fatal(err)
	}
	if _, err := m.FillPool(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	timed(b, func() func() {
		sb, err := m.Create(ctx, sandbox.CreateOptions{Pool: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			m.Remove(ctx, sb.ID, true)
			if _, err := m.FillPool(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
