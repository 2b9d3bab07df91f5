// Package bench measures smolvm's user-facing latencies against the stock
// runsc CLI in the same run, and prints p50/p99 with the ratio.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
)

// Options configure a run.
type Options struct {
	Manager *manager.Manager
	Runsc   string
	// Stock is the baseline's runsc: the same binary as Runsc unless
	// given, so that an upstream build can be set beside a patched one.
	Stock string
	// Dir holds the baseline's scratch sandboxes.
	Dir string
	// Cold is how many sandboxes to cold-start; Exec how many execs.
	Cold, Exec int
	// Self is the smolvm binary, run on DataDir (Manager's) for the
	// CLI's lines; "" leaves them out.
	Self, DataDir string
}

func (o Options) stock() string {
	if o.Stock != "" {
		return o.Stock
	}
	return o.Runsc
}

// Series is one measured operation (package series, which benchmarks of
// packages the API server imports use directly).
type Series = series.Series

// Run measures every series. Operations alternate between smolvm and the
// baseline so that machine noise hits both alike.
func Run(ctx context.Context, o Options) ([]Series, error) {
	cold := Series{Name: "cold start: create+start+exec true", Baseline: "runsc run -detach + runsc exec true"}
	stockCold := Series{Name: "runsc run -detach + runsc exec true"}
	rootfs, err := o.Manager.ImageRootfs(ctx, "") // the image smolvm's sandboxes run
	if err != nil {
		return nil, err
	}
	steps, stockSteps := coldStepSeries()
	for i := 0; i < o.Cold; i++ {
		d, err := coldStart(ctx, o.Manager)
		if err != nil {
			return nil, err
		}
		cold.Samples = append(cold.Samples, d)
		d, err = stockColdStart(ctx, o, rootfs, i)
		if err != nil {
			return nil, err
		}
		stockCold.Samples = append(stockCold.Samples, d)
		mine, err := coldSteps(ctx, o.Manager)
		if err != nil {
			return nil, err
		}
		theirs, err := stockColdSteps(ctx, o, rootfs, i)
		if err != nil {
			return nil, err
		}
		for j := range steps {
			steps[j].Samples = append(steps[j].Samples, mine[j])
			stockSteps[j].Samples = append(stockSteps[j].Samples, theirs[j])
		}
	}

	execS := Series{Name: "exec true (Go API)", Baseline: "runsc exec true"}
	stockExec := Series{Name: "runsc exec true"}
	sb, err := o.Manager.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		return nil, err
	}
	defer o.Manager.Remove(context.WithoutCancel(ctx), sb.ID, true)
	stock, err := gvisor.NewStock(o.stock(), rootfs, filepath.Join(o.Dir, "stock-exec"), "stock-exec")
	if err != nil {
		return nil, err
	}
	defer stock.Delete(context.WithoutCancel(ctx))
	if err := stock.Run(ctx); err != nil {
		return nil, err
	}
	for i := 0; i < o.Exec; i++ {
		t := time.Now()
		exit, err := o.Manager.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
		if err != nil || exit.Code != 0 {
			return nil, fmt.Errorf("exec: %v %+v", err, exit)
		}
		execS.Samples = append(execS.Samples, time.Since(t))
		// The stock exec is ~10x slower: sample it less often.
		if i%5 == 0 {
			t = time.Now()
			if err := stock.Exec(ctx, "/usr/bin/true"); err != nil {
				return nil, err
			}
			stockExec.Samples = append(stockExec.Samples, time.Since(t))
		}
	}
	out := []Series{cold, stockCold}
	for j := range steps {
		out = append(out, steps[j], stockSteps[j])
	}
	return append(out, execS, stockExec), nil
}

// coldStepNames are a cold start's steps, smolvm's and stock runsc's side
// by side: where the time goes. Split, each step is its own call (runsc
// create, then runsc start), which the one-call cold start above is not.
var coldStepNames = [3][2]string{
	{"cold step 1: create (record, rootfs, runsc create)", "stock step 1: runsc create"},
	{"cold step 2: start (runsc start, agent answers)", "stock step 2: runsc start"},
	{"cold step 3: first exec true", "stock step 3: first runsc exec true"},
}

func coldStepSeries() (mine, stock [3]Series) {
	for i, n := range coldStepNames {
		mine[i], stock[i] = Series{Name: n[0], Baseline: n[1]}, Series{Name: n[1]}
	}
	return mine, stock
}

// coldSteps times a cold start split into its steps.
func coldSteps(ctx context.Context, m *manager.Manager) (d [3]time.Duration, err error) {
	t := time.Now()
	sb, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		return d, err
	}
	defer m.Remove(context.WithoutCancel(ctx), sb.ID, true)
	d[0], t = time.Since(t), time.Now()
	if _, err := m.Start(ctx, sb.ID); err != nil {
		return d, err
	}
	d[1], t = time.Since(t), time.Now()
	exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
	if err != nil || exit.Code != 0 {
		return d, fmt.Errorf("first exec: %v %+v", err, exit)
	}
	d[2] = time.Since(t)
	return d, nil
}

// stockColdSteps is coldSteps for stock runsc; its bundle is written
// untimed, as stockColdStart's is.
func stockColdSteps(ctx context.Context, o Options, rootfs backend.Rootfs, i int) (d [3]time.Duration, err error) {
	id := fmt.Sprintf("stock-steps-%d", i)
	s, err := gvisor.NewStock(o.stock(), rootfs, filepath.Join(o.Dir, id), id)
	if err != nil {
		return d, err
	}
	defer s.Delete(context.WithoutCancel(ctx))
	for j, step := range []func(context.Context) error{s.Create, s.Start, func(ctx context.Context) error { return s.Exec(ctx, "/usr/bin/true") }} {
		t := time.Now()
		if err := step(ctx); err != nil {
			return d, err
		}
		d[j] = time.Since(t)
	}
	return d, nil
}

func coldStart(ctx context.Context, m *manager.Manager) (time.Duration, error) {
	t := time.Now()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		return 0, err
	}
	defer m.Remove(context.WithoutCancel(ctx), sb.ID, true)
	exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
	if err != nil || exit.Code != 0 {
		return 0, fmt.Errorf("first exec: %v %+v", err, exit)
	}
	return time.Since(t), nil
}

func stockColdStart(ctx context.Context, o Options, rootfs backend.Rootfs, i int) (time.Duration, error) {
	id := fmt.Sprintf("stock-cold-%d", i)
	s, err := gvisor.NewStock(o.stock(), rootfs, filepath.Join(o.Dir, id), id)
	if err != nil {
		return 0, err
	}
	defer s.Delete(context.WithoutCancel(ctx))
	t := time.Now()
	if err := s.Run(ctx); err != nil {
		return 0, err
	}
	if err := s.Exec(ctx, "/usr/bin/true"); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// Print writes a table of p50/p99 and, for series with a baseline, how
// many times faster smolvm was at p50.
func Print(w io.Writer, series []Series) error {
	byName := map[string]Series{}
	for _, s := range series {
		byName[s.Name] = s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tN\tP50\tP99\tVS BASELINE (p50)")
	for _, s := range series {
		if len(s.Samples) == 0 {
			continue
		}
		ratio := ""
		if b, ok := byName[s.Baseline]; ok && s.Quantile(0.5) > 0 && b.Quantile(0.5) > 0 {
			r := float64(b.Quantile(0.5)) / float64(s.Quantile(0.5))
			ratio = fmt.Sprintf("%.2fx faster", r)
			if r < 1 {
				ratio = fmt.Sprintf("%.2fx slower", 1/r)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Name, len(s.Samples), ms(s.Quantile(0.5)), ms(s.Quantile(0.99)), ratio)
	}
	return tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// TempDir makes the baseline's scratch directory under the data dir, so it
// sits on the same filesystem as smolvm's own sandboxes.
func TempDir(dataDir string) (string, error) {
	return os.MkdirTemp(filepath.Join(dataDir, "sandboxes"), ".bench-")
}
