package cli

import (
	"fmt"
	"os"
	"text/tabwriter"
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
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events SANDBOX",
		Short: "Print a sandbox's deny log: connections and DNS queries its policy refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, done, err := a.sandboxes(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			evs, err := ops.NetEvents(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				if evs == nil {
					evs = []sandbox.NetworkEvent{}
				}
				return writeJSON(a.stdout, evs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tPROTO\tDESTINATION\tREASON")
			for _, ev := range evs {
				dst := ev.Dst
				if ev.Name != "" {
					dst = ev.Name + " " + ev.Dst
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ev.Time.Local().Format(time.DateTime), ev.Proto, dst, ev.Reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) netUpdateCmd() *cobra.Command {
	var f netFlags
	cmd := &cobra.Command{
		Use:   "update SANDBOX --net MODE [--allow-host NAME]... [--allow-cidr CIDR]...",
		Short: "Replace a running sandbox's network policy; new connections follow it at once",
		Long: `Replace a running sandbox's network policy: its mode and allow lists,
which the flags give in full. Published ports stay. Connections already open
carry on; new connections and DNS queries follow the new policy, and
addresses admitted by earlier DNS answers are forgotten.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("net") {
				return fmt.Errorf("net update: --net is required (none, egress or full)")
			}
			ops, done, err := a.sandboxes(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			sb, err := ops.NetUpdate(cmd.Context(), args[0], f.policy())
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, sb.Name)
			return nil
		},
	}
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
