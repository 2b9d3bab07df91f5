package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/runtime/backend/vm"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) benchCmd() *cobra.Command {
	var cold, execs, snaps, viaAPI int
	var backendName, img, stock string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure cold start, exec, checkpoint, restore, fork and pool latency (p50/p99) against the stock runsc CLI",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cold < 0 || execs < 0 || snaps < 0 || viaAPI < 0 || cold > 1000 || execs > 100000 || snaps > 1000 || viaAPI > 100000 {
				return fmt.Errorf("--cold, --exec, --snapshots and --api must be between 0 and 1000, 100000, 1000 and 100000")
			}
			ctx := cmd.Context()
			a.noRefill = true
			if backendName == "" {
				var err error
				if backendName, err = a.defaultBackend(); err != nil {
					return err
				}
			}
			e, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer e.Close()
			if backendName != "gvisor" {
				return a.benchBackend(ctx, e, backendName, img, cold, execs, snaps)
			}
			runsc, err := a.runscPath()
			if err != nil {
				return err
			}
			dir, err := bench.TempDir(a.dataDir)
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fmt.Fprintf(a.stdout, "load average before: %s\n\n", loadAverage())
			o := bench.Options{Manager: e.mgr, Runsc: runsc, Stock: stock, Dir: dir, Cold: cold, Exec: execs, Self: a.self, DataDir: a.dataDir}
			series, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if viaAPI > 0 {
				more, err := bench.RunAPI(ctx, bench.APIOptions{Manager: e.mgr, Dir: dir, Exec: viaAPI, Creates: cold, Concurrent: 100})
				if err != nil {
					return err
				}
				series = append(series, more...)
			}
			var mem []bench.Memory
			if snaps > 0 {
				more, m, err := bench.Snapshots(ctx, o, e.snaps, snaps)
				if err != nil {
					return err
				}
				series, mem = append(series, more...), m
			}
			return a.printBench(series, mem)
		},
	}
	cmd.Flags().IntVar(&cold, "cold", 10, "sandboxes to cold-start")
	cmd.Flags().IntVar(&execs, "exec", 200, "execs to time")
	cmd.Flags().IntVar(&viaAPI, "api", 0, "also time this many execs through the HTTP API (with the direct ones in the same run), 100 concurrent streaming execs, and --cold creates")
	cmd.Flags().StringVar(&backendName, "backend", "", "backend to measure beside gvisor in the same run (vm; default: this host's default backend; gvisor: beside stock runsc)")
	cmd.Flags().StringVar(&stock, "stock-runsc", "", "runsc of the stock baseline (default: smolvm's own runsc, which carries tools/runsc/patches; give an upstream build to compare with it)")
	cmd.Flags().StringVar(&img, "image", "", "image the compared backends run (default: the base image if built; --backend vm refuses the builtin host one)")
	cmd.Flags().IntVar(&snaps, "snapshots", 0, "times to measure each snapshot operation (checkpoint, restore, fork, pool); 0 skips them")
	return cmd
}

// benchBackend measures backendName beside gVisor, on img, and says
// which accelerator a VM ran under and how loaded the host was.
func (a *app) benchBackend(ctx context.Context, e *env, backendName, img string, cold, execs, snaps int) error {
	if img == "" {
		var err error
		if img, err = e.images.Default(ctx); err != nil {
			return err
		}
	}
	if img == sandbox.DefaultImage {
		return fmt.Errorf("bench --backend %s: the builtin %q image cannot become a VM disk: build the base image (smolvm image build base) or give --image", backendName, sandbox.DefaultImage)
	}
	if backendName == "vm" {
		vb, err := a.vmBackend()
		if err != nil {
			return err
		}
		note := ""
		if vb.Accel() == vm.AccelTCG {
			note = " (no usable /dev/kvm: software emulation, far slower than KVM)"
		}
		fmt.Fprintf(a.stdout, "vm backend under %s%s; baseline gvisor in the same run\n", strings.ToUpper(vb.Accel()), note)
	}
	fmt.Fprintf(a.stdout, "load average before: %s\n\n", loadAverage())
	runsc, err := a.runscPath()
	if err != nil {
		return err
	}
	series, mem, err := bench.Compare(ctx, bench.CompareOptions{Manager: e.mgr, Backend: backendName, Baseline: "gvisor", Image: img, Cold: cold, Exec: execs, Snapshots: snaps,
		Self: a.self, DataDir: a.dataDir, Runsc: runsc})
	if err != nil {
		return err
	}
	return a.printBench(series, mem)
}

// printBench writes the series' table, the memory figures if any, and the
// load average once they are taken.
func (a *app) printBench(series []bench.Series, mem []bench.Memory) error {
	if err := bench.Print(a.stdout, series); err != nil {
		return err
	}
	if len(mem) > 0 {
		fmt.Fprintln(a.stdout)
		if err := bench.PrintMemory(a.stdout, mem); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stdout, "\nload average after: %s\n", loadAverage())
	return nil
}

// loadAverage is the host's 1, 5 and 15 minute load averages, which every
// figure must be read beside on a shared machine.
func loadAverage() string {
	p, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(p) + "? ? ?")[:3], " ")
}
