package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/sandbox"
)

// netFlags are the policy flags of run, create and net update.
type netFlags struct {
	mode         string
	hosts, cidrs []string
}

func (f *netFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.mode, "net", "none", "network: none (loopback only), egress (allowed hosts and CIDRs only) or full (all but metadata, host and link-local)")
	fs.StringArrayVar(&f.hosts, "allow-host", nil, "with --net egress: a DNS name the sandbox may reach, exact or *.example.com (repeatable)")
	fs.StringArrayVar(&f.cidrs, "allow-cidr", nil, "a CIDR or address the sandbox may reach, even a denied one such as the host (repeatable)")
}

func (f *netFlags) policy() sandbox.Network {
	return sandbox.Network{Mode: sandbox.NetworkMode(f.mode), Hosts: f.hosts, CIDRs: f.cidrs}
}

func (a *app) netCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Inspect and change sandboxes' network policy",
	}
	cmd.AddCommand(a.netEventsCmd(), a.netUpdateCmd())
	return cmd
}

func (a *app) netEventsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "events SANDBOX",
		Short: "Print a sandbox's deny log: connections and DNS queries its policy refused",
		Args:  cobra.ExactArgs(1),
	}, "print JSON", func(w io.Writer, evs []sandbox.NetworkEvent) error {
		return table(w, "TIME\tPROTO\tDESTINATION\tREASON", func(tw io.Writer) {
			for _, ev := range evs {
				dst := ev.Dst
				if ev.Name != "" {
					dst = ev.Name + " " + ev.Dst
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ev.Time.Local().Format(time.DateTime), ev.Proto, dst, ev.Reason)
			}
		})
	}, on((*session).sandboxes, func(s *session, ops sandbox.Service, args []string) ([]sandbox.NetworkEvent, error) {
		evs, err := ops.NetEvents(s.ctx, args[0])
		if evs == nil {
			evs = []sandbox.NetworkEvent{} // [] in JSON
		}
		return evs, err
	}))
}

func (a *app) netUpdateCmd() *cobra.Command {
	var f netFlags
	cmd := command(a, &cobra.Command{
		Use:   "update SANDBOX --net MODE [--allow-host NAME]... [--allow-cidr CIDR]...",
		Short: "Replace a running sandbox's network policy; new connections follow it at once",
		Long: `Replace a running sandbox's network policy: its mode and allow lists,
which the flags give in full. Published ports stay. Connections already open
carry on; new connections and DNS queries follow the new policy, and
addresses admitted by earlier DNS answers are forgotten.`,
		Args: cobra.ExactArgs(1),
	}, "", printLine(func(sb *sandbox.Sandbox) string { return sb.Name }), func(s *session, args []string) (*sandbox.Sandbox, error) {
		if !s.cmd.Flags().Changed("net") {
			return nil, fmt.Errorf("net update: --net is required (none, egress or full)")
		}
		ops, err := s.sandboxes()
		if err != nil {
			return nil, err
		}
		return ops.NetUpdate(s.ctx, args[0], f.policy())
	})
	f.register(cmd.Flags())
	return cmd
}

// netHelperCmd runs a sandbox network's helper (DNS resolver, published
// ports, deny log); Setup starts it, detached, and tells it its directory.
func (a *app) netHelperCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "net-helper DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ready := os.NewFile(3, "ready")
			defer ready.Close()
			return network.RunHelper(cmd.Context(), args[0], ready)
		},
	}
}
