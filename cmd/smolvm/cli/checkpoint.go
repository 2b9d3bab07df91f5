package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/sandbox"
)

func (a *app) checkpointCmd() *cobra.Command {
	var o sandbox.CheckpointOptions
	cmd := command(a, &cobra.Command{
		Use:   "checkpoint [--name SNAP] [--stop] SANDBOX",
		Short: "Save a running sandbox's memory, processes and files as a snapshot",
		Long: "Save a running sandbox's memory, processes, open files and writable layer as a snapshot.\n" +
			"The sandbox keeps running, unchanged, unless --stop is given. Prints the snapshot ID.",
		Args: cobra.ExactArgs(1),
	}, "print the snapshot's record as JSON", printLine(func(snap *sandbox.Snapshot) string { return snap.ID }),
		on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) (*sandbox.Snapshot, error) {
			return ops.Checkpoint(s.ctx, args[0], o)
		}))
	cmd.Flags().StringVar(&o.Name, "name", "", "name the snapshot")
	cmd.Flags().BoolVar(&o.Stop, "stop", false, "stop the sandbox once it is saved")
	return cmd
}

func (a *app) restoreCmd() *cobra.Command {
	var o sandbox.RestoreOptions
	var labels []string
	cmd := command(a, &cobra.Command{
		Use:   "restore [--name NEW] [--ttl D] [--label K=V]... SNAPSHOT",
		Short: "Start a new sandbox in the state saved in a snapshot",
		Long:  "Start a new sandbox in the state saved in a snapshot, with its own ID, name, hostname and machine ID. Prints the new sandbox's ID.",
		Args:  cobra.ExactArgs(1),
	}, "", printLine(sandboxID), on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) (*sandbox.Sandbox, error) {
		var err error
		if o.Labels, err = parseLabels(labels); err != nil {
			return nil, err
		}
		return ops.Restore(s.ctx, args[0], o)
	}))
	cmd.Flags().StringVar(&o.Name, "name", "", "name the new sandbox")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label KEY=VALUE, replacing the snapshot's labels (repeatable)")
	cmd.Flags().DurationVar(&o.TTL, "ttl", 0, "time to live from the restore, replacing the snapshot's (0: the snapshot's)")
	return cmd
}

func (a *app) forkCmd() *cobra.Command {
	var o sandbox.ForkOptions
	cmd := command(a, &cobra.Command{
		Use:   "fork [-n N] [--name-prefix P] SANDBOX",
		Short: "Make N running copies of a running sandbox, which keeps running",
		Long: fmt.Sprintf("Make N running copies of a running sandbox, which keeps running. Each copy has its own ID,\n"+
			"name, hostname and machine ID. All or nothing: if one copy fails, none is kept. N is at most %d.\n"+
			"Prints the copies' IDs, one per line.", sandbox.MaxFork),
		Args: cobra.ExactArgs(1),
	}, "", printIDs, on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) ([]*sandbox.Sandbox, error) {
		return ops.Fork(s.ctx, args[0], o)
	}))
	cmd.Flags().IntVarP(&o.N, "n", "n", 1, "number of copies")
	cmd.Flags().StringVar(&o.NamePrefix, "name-prefix", "", "name the copies PREFIX-1 … PREFIX-N")
	return cmd
}

func (a *app) pauseCmd() *cobra.Command {
	return a.stateCmd("pause SANDBOX...", "Freeze running sandboxes: no CPU, state kept", sandbox.Service.Pause)
}

func (a *app) resumeCmd() *cobra.Command {
	return a.stateCmd("resume SANDBOX...", "Thaw paused sandboxes", sandbox.Service.Resume)
}
