package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) snapshotCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "Manage stored sandbox checkpoints (ls, inspect, rm)",
	}
	c.AddCommand(a.snapshotLsCmd(), a.snapshotInspectCmd(), a.snapshotRmCmd())
	return c
}

// snapshotInUse reports whether a sandbox depends on a snapshot, so that
// snapshot rm does not delete what a sandbox was restored from.
func (a *app) snapshotInUse(ctx context.Context) func(string) (bool, error) {
	return func(id string) (bool, error) {
		st, err := store.Open(ctx, a.dataDir)
		if err != nil {
			return false, err
		}
		defer st.Close()
		return manager.SnapshotInUse(ctx, st, id)
	}
}

// snapshotStore opens the snapshot store of the data directory.
func (a *app) snapshotStore(ctx context.Context) (*snapshot.Store, func() error, error) {
	st, err := store.Open(ctx, a.dataDir)
	if err != nil {
		return nil, nil, err
	}
	s, err := snapshot.Open(ctx, a.dataDir, st)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return s, st.Close, nil
}

func (a *app) snapshotLsCmd() *cobra.Command {
	var jsonOut bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.snapshotStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			snaps, err := s.List(ctx)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, snaps)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSOURCE\tPARENT\tIMAGE\tSIZE\tAGE")
			now := time.Now()
			for _, sn := range snaps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(strings.Join(sn.Names, ",")), imageShortID(sn.ID),
					orDash(snapshotSource(sn.Lineage)), orDash(imageShortID(sn.Lineage.Parent)), orDash(imageShortID(sn.ImageID)),
					units.FormatBytes(sn.Size), age(now.Sub(sn.Created)))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&jsonOut, "json", false, "print the snapshots as a JSON array")
	return c
}

// snapshotSource names the sandbox a snapshot was taken from.
func snapshotSource(l sandbox.Lineage) string {
	if l.SandboxName != "" {
		return l.SandboxName
	}
	return l.Sandbox
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) snapshotInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME|ID",
		Short: "Print a snapshot's record, files and lineage as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.snapshotStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			snap, err := s.Get(ctx, args[0])
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, snap)
		},
	}
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME|ID...",
		Short: "Remove snapshots no sandbox depends on (a name of several removes just that name)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, done, err := a.snapshotStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			var last error
			for _, arg := range args {
				if err := s.Remove(ctx, arg, a.snapshotInUse(ctx)); err != nil {
					if last != nil {
						fmt.Fprintln(a.stderr, "smolvm:", last)
					}
					last = err
					continue
				}
				fmt.Fprintln(a.stdout, "Removed", arg)
			}
			return last
		},
	}
}
