package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) poolCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "pool",
		Short: "Keep sandboxes ready, so that run/create --pool, restore and fork skip every cold step",
	}
	c.AddCommand(a.poolCreateCmd(), a.poolLsCmd(), a.poolRmCmd(), a.poolFillCmd())
	return c
}

// spawnFill refills a pool from a detached smolvm process.
func (a *app) spawnFill(runsc, pool string) {
	if err := a.spawn("pool-"+pool+".log", nil, "--runsc", runsc, "pool", "fill", pool); err != nil {
		fmt.Fprintf(a.stderr, "smolvm: pool %s will not refill: %v\n", pool, err)
	}
}

// spawn runs smolvm args on this data dir in a detached process, which
// outlives this one, with extra as its descriptors from 3 on; its output
// goes to the log named in the data dir's locks directory.
func (a *app) spawn(log string, extra []*os.File, args ...string) error {
	f, err := os.OpenFile(filepath.Join(a.dataDir, "locks", log), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(a.self, append([]string{"--data-dir", a.dataDir}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = f, f, extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// createPool records the pool o and fills it: before returning with wait,
// else by a detached smolvm pool fill.
func (a *app) createPool(s *session, o sandbox.PoolOptions, wait bool) (*sandbox.Pool, error) {
	if s.host != "" {
		return nil, fmt.Errorf("pools are made on the server's host: use its API (POST /v1/pools), not SMOLVM_HOST")
	}
	e, err := s.runtime()
	if err != nil {
		return nil, err
	}
	p, err := e.mgr.CreatePool(s.ctx, o)
	if err != nil {
		return nil, err
	}
	if wait {
		return p, a.fill(s.ctx, e, p.Name)
	}
	if a.self != "" {
		runsc, err := a.runscPath()
		if err != nil {
			return nil, err
		}
		a.spawnFill(runsc, p.Name)
	}
	return p, nil
}

func (a *app) poolCreateCmd() *cobra.Command {
	var (
		lf     limitFlags
		o      sandbox.PoolOptions
		budget string
		wait   bool
	)
	cmd := a.withSession(&cobra.Command{
		Use:   "create [IMAGE] [--size N] [--targets N] [--from SNAPSHOT --hot N] [--name P] [--backend B] [--memory-budget B] [--wait]",
		Short: "Create a pool of ready sandboxes of one image and set of limits",
		Long: "Create a pool of ready sandboxes of one image and set of limits: --size started ones, which\n" +
			"run/create --pool take, and --targets created, never started ones, which restores and forks of\n" +
			"sandboxes with that image and those limits (and no network) restore into. It fills in the\n" +
			"background (or before returning, with --wait) and refills after each sandbox taken from it,\n" +
			"as long as the waiting sandboxes' memory stays within the budget.\n\n" +
			"With --from SNAPSHOT --hot N it holds N copies already restored from the snapshot, paused and\n" +
			"with no identity yet: a restore of that snapshot claims one, which resumes with its own name,\n" +
			"hostname, environment and machine ID. The snapshot cannot be removed while the pool exists.",
		Args: cobra.MaximumNArgs(1),
	}, func(s *session, args []string) error {
		var err error
		if o.Limits, err = lf.limits(s.cmd.Flags()); err != nil {
			return err
		}
		if budget != "" {
			if o.MemoryBudget, err = units.ParseBytes(budget); err != nil {
				return fmt.Errorf("--memory-budget: %w", err)
			}
		}
		if len(args) == 1 {
			o.Image = args[0]
		}
		p, err := a.createPool(s, o, wait)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, p.Name)
		return nil
	})
	lf.register(cmd.Flags())
	cmd.Flags().StringVar(&o.Name, "name", "", "pool name (default: the image)")
	cmd.Flags().IntVar(&o.Size, "size", 0, fmt.Sprintf("started sandboxes to keep ready (0 to %d)", sandbox.MaxPoolSize))
	cmd.Flags().IntVar(&o.Targets, "targets", 0, fmt.Sprintf("restore targets to keep ready for restore and fork (0 to %d)", sandbox.MaxPoolSize))
	cmd.Flags().StringVar(&o.Backend, "backend", "", "backend to run the pool's sandboxes on (default: this smolvm's default; a hot pool's is its snapshot's)")
	cmd.Flags().StringVar(&o.From, "from", "", "snapshot whose copies the pool holds restored and paused (with --hot)")
	cmd.Flags().IntVar(&o.Hot, "hot", 0, fmt.Sprintf("hot copies of --from to keep ready for restores of it (0 to %d)", sandbox.MaxPoolSize))
	cmd.Flags().StringVar(&budget, "memory-budget", "", "memory the waiting sandboxes may use together (default "+units.FormatBytes(sandbox.DefaultMemoryBudget)+")")
	cmd.Flags().BoolVar(&wait, "wait", false, "fill the pool before returning")
	return cmd
}

// fill fills a pool in the foreground; reaching the budget is reported,
// but is not a failure.
func (a *app) fill(ctx context.Context, e *env, pool string) error {
	_, err := e.mgr.FillPool(ctx, pool)
	if errors.Is(err, sandbox.ErrPoolBudget) {
		fmt.Fprintln(a.stderr, "smolvm:", err)
		return nil
	}
	return err
}

func (a *app) poolFillCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:    "fill POOL",
		Short:  "Start sandboxes until the pool is full (what the background refill runs)",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
	}, func(s *session, args []string) error {
		e, err := s.runtime()
		if err != nil {
			return err
		}
		return a.fill(s.ctx, e, args[0])
	})
}

// ready is a pool's READY column: its started sandboxes waiting, or, for
// a hot pool, its restored copies waiting ("2/3 hot").
func ready(p *sandbox.Pool) string {
	if p.Hot > 0 {
		return fmt.Sprintf("%d/%d hot", p.HotReady, p.Hot)
	}
	return fmt.Sprintf("%d/%d", p.Ready, p.Size)
}

func (a *app) poolLsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "ls",
		Short: "List pools with how many sandboxes wait in each",
		Args:  cobra.NoArgs,
	}, "print JSON", func(w io.Writer, pools []*sandbox.Pool) error {
		now := time.Now()
		return table(w, "NAME\tIMAGE\tREADY\tTARGETS\tMEMORY USED\tBUDGET\tCPUS\tMEMORY\tAGE", func(tw io.Writer) {
			for _, p := range pools {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%g\t%s\t%s\n", p.Name, p.Image, ready(p), p.TargetsReady, p.Targets,
					units.FormatBytes(p.MemoryUsed), units.FormatBytes(p.MemoryBudget), p.Limits.CPUs,
					units.FormatBytes(p.Limits.Memory), age(now.Sub(p.CreatedAt)))
			}
		})
	}, on((*session).runtime, func(s *session, e *env, _ []string) ([]*sandbox.Pool, error) {
		return e.mgr.Pools(s.ctx)
	}))
}

func (a *app) poolRmCmd() *cobra.Command {
	return a.eachCmd(&cobra.Command{
		Use:   "rm POOL...",
		Short: "Remove pools and the sandboxes waiting in them",
	}, func(ctx context.Context, ops sandbox.Service, n string) error {
		return ops.RemovePool(ctx, n)
	})
}
