package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var cold, execs, viaAPI int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure cold start and exec latency (p50/p99) against the stock runsc CLI",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cold < 1 || execs < 1 || cold > 1000 || execs > 100000 || viaAPI < 0 || viaAPI > 100000 {
				return fmt.Errorf("--cold, --exec and --api must be between 1 and 1000 / 100000 / 100000")
			}
			ctx := cmd.Context()
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
			series, err := bench.Run(ctx, bench.Options{Manager: e.mgr, Runsc: runsc, Dir: dir, Cold: cold, Exec: execs})
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
			return bench.Print(a.stdout, series)
		},
	}
	cmd.Flags().IntVar(&cold, "cold", 10, "sandboxes to cold-start")
	cmd.Flags().IntVar(&execs, "exec", 200, "execs to time")
	cmd.Flags().IntVar(&viaAPI, "api", 0, "also time this many execs through the HTTP API (with the direct ones in the same run), 100 concurrent streaming execs, and --cold creates")
	return cmd
}
