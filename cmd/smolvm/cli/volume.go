package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/sandbox"
)

func (a *app) volumeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "volume",
		Short: "Manage named volumes (create, ls, inspect, rm)",
		Long: "A volume is a file system of a fixed size that outlives sandboxes: mount it with\n" +
			"run/create --volume NAME:/path[:ro], in several sandboxes at once. docs/volumes.md.",
	}
	c.AddCommand(a.volumeCreateCmd(), a.volumeLsCmd(), a.volumeInspectCmd(), a.volumeRmCmd())
	return c
}

func (a *app) volumeCreateCmd() *cobra.Command {
	var size string
	cmd := command(a, &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume",
		Args:  cobra.ExactArgs(1),
	}, "print the volume as JSON", printLine(func(v *sandbox.Volume) string { return v.Name }),
		on((*session).volumes, func(s *session, vs sandbox.VolumeService, args []string) (*sandbox.Volume, error) {
			n, err := units.ParseBytes(size)
			if err != nil {
				return nil, fmt.Errorf("--size: %w", err)
			}
			return vs.CreateVolume(s.ctx, sandbox.VolumeOptions{Name: args[0], Size: n})
		}))
	cmd.Flags().StringVar(&size, "size", units.FormatBytes(sandbox.DefaultVolumeSize), "the quota: writes beyond it fail with \"no space left\"")
	return cmd
}

func (a *app) volumeLsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "ls",
		Short: "List volumes and the sandboxes that mount them",
		Args:  cobra.NoArgs,
	}, "print the volumes as a JSON array", func(w io.Writer, vs []*sandbox.Volume) error {
		now := time.Now()
		return table(w, "NAME\tSIZE\tUSED\tTENANT\tSANDBOXES\tAGE", func(tw io.Writer) {
			for _, v := range vs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, units.FormatBytes(v.Size), units.FormatBytes(v.Used),
					orDash(v.Tenant), orDash(strings.Join(v.UsedBy, ",")), age(now.Sub(v.CreatedAt)))
			}
		})
	}, on((*session).volumes, func(s *session, vs sandbox.VolumeService, _ []string) ([]*sandbox.Volume, error) {
		return vs.ListVolumes(s.ctx)
	}))
}

func (a *app) volumeInspectCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a volume as JSON",
		Args:  cobra.ExactArgs(1),
	}, "", printJSON, on((*session).volumes, func(s *session, vs sandbox.VolumeService, args []string) (*sandbox.Volume, error) {
		return vs.GetVolume(s.ctx, args[0])
	}))
}

func (a *app) volumeRmCmd() *cobra.Command {
	var force bool
	cmd := a.withSession(&cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove volumes and their files; one a sandbox mounts needs --force",
		Args:  cobra.MinimumNArgs(1),
	}, func(s *session, args []string) error {
		vs, err := s.volumes()
		if err != nil {
			return err
		}
		return a.removeEach(args, func(n string) error { return vs.RemoveVolume(s.ctx, n, force) })
	})
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove it even if sandboxes mount it (running ones keep it until they stop; none can start again)")
	return cmd
}
