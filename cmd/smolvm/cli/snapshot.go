package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) snapshotCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "Manage stored sandbox checkpoints (ls, inspect, rm)",
	}
	c.AddCommand(a.snapshotLsCmd(), a.snapshotInspectCmd(), a.snapshotRmCmd(), a.snapshotSealCmd())
	return c
}

// snapshotSealCmd finishes the seal of a snapshot that another smolvm
// command committed and handed over as it exited (sealAside), holding the
// staging's lock as descriptor 3.
func (a *app) snapshotSealCmd() *cobra.Command {
	return a.withSession(&cobra.Command{
		Use:    "seal SNAPSHOT STAGING",
		Short:  "Finish sealing a snapshot another smolvm command committed (internal)",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
	}, func(s *session, args []string) error {
		snaps, err := s.snapshots()
		if err != nil {
			return err
		}
		return snaps.Finish(s.ctx, args[0], args[1], os.NewFile(3, "staging lock"))
	})
}

// sealAside finishes h in a detached smolvm snapshot seal.
func (a *app) sealAside(h snapshot.Handoff) error {
	return a.spawn("seal.log", []*os.File{h.Lock}, "snapshot", "seal", h.ID, h.Staging)
}

func (a *app) snapshotLsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "ls",
		Short: "List snapshots, newest first",
		Args:  cobra.NoArgs,
	}, "print the snapshots as a JSON array", func(w io.Writer, snaps []sandbox.Snapshot) error {
		now := time.Now()
		return table(w, "NAME\tID\tSOURCE\tPARENT\tIMAGE\tSIZE\tAGE", func(tw io.Writer) {
			for _, sn := range snaps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(strings.Join(sn.Names, ",")), imageShortID(sn.ID),
					orDash(snapshotSource(sn.Lineage)), orDash(imageShortID(sn.Lineage.Parent)), orDash(imageShortID(sn.ImageID)),
					units.FormatBytes(sn.Size), age(now.Sub(sn.Created)))
			}
		})
	}, on((*session).snapshots, func(s *session, snaps *snapshot.Store, _ []string) ([]sandbox.Snapshot, error) {
		return snaps.List(s.ctx)
	}))
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
	return command(a, &cobra.Command{
		Use:   "inspect NAME|ID",
		Short: "Print a snapshot's record, files and lineage as JSON",
		Args:  cobra.ExactArgs(1),
	}, "", printJSON, on((*session).snapshots, func(s *session, snaps *snapshot.Store, args []string) (*sandbox.Snapshot, error) {
		return snaps.Get(s.ctx, args[0])
	}))
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return removeCmd(a, &cobra.Command{
		Use:   "rm NAME|ID...",
		Short: "Remove snapshots no sandbox depends on (a name of several removes just that name)",
	}, (*session).snapshots, (*snapshot.Store).Remove, manager.SnapshotInUse)
}
