package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var cold, execs, snaps, viaAPI int
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
			e, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer e.Close()
			runsc, err := a.runscPath()
			if err != nil {
				return err
			}
			dir, err := bench.TempDir(a.dataDir)
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			o := bench.Options{Manager: e.mgr, Runsc: runsc, Dir: dir, Cold: cold, Exec: execs}
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
			if err := bench.Print(a.stdout, series); err != nil {
				return err
			}
			if len(mem) == 0 {
				return nil
			}
			fmt.Fprintln(a.stdout)
			return bench.PrintMemory(a.stdout, mem)
		},
	}
	cmd.Flags().IntVar(&cold, "cold", 10, "sandboxes to cold-start")
	cmd.Flags().IntVar(&execs, "exec", 200, "execs to time")
	cmd.Flags().IntVar(&viaAPI, "api", 0, "also time this many execs through the HTTP API (with the direct ones in the same run), 100 concurrent streaming execs, and --cold creates")
	cmd.Flags().IntVar(&snaps, "snapshots", 0, "times to measure each snapshot operation (checkpoint, restore, fork, pool); 0 skips them")
	return cmd
}
