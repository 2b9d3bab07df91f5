package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// The tenant commands work on the data dir's database, which a running
// smolvm serve reads at every request: a key added or removed here works,
// or stops working, at once.

func (a *app) tenantCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "tenant",
		Short: "Tenants of smolvm serve: their API keys and quotas",
		Long: "Tenants share one smolvm serve: each key sees and touches only its tenant's sandboxes,\n" +
			"snapshots, pools, ports, files and events, within its quota. The server's own token\n" +
			"(smolvm serve token) is the admin's and sees everything.",
	}
	key := &cobra.Command{Use: "key", Short: "Add or revoke a tenant's API keys"}
	key.AddCommand(a.tenantKeyAddCmd(), a.tenantKeyRmCmd())
	c.AddCommand(a.tenantAddCmd(), a.tenantLsCmd(), a.tenantRmCmd(), a.tenantQuotaCmd(), key)
	return c
}

// tenants opens the data dir's tenants.
func (s *session) tenants() (*tenant.Store, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	return tenant.Open(s.ctx, st)
}

// quotaFlags are the flags of a quota.
type quotaFlags struct {
	sandboxes, pools, creates int
	memory, snapshots, vols   string
	cpus                      float64
}

func (q *quotaFlags) register(f *pflag.FlagSet) {
	f.IntVar(&q.sandboxes, "sandboxes", 0, "sandboxes not stopped at once (a fork of N counts N); 0: no limit")
	f.StringVar(&q.memory, "memory", "", "memory limits of those sandboxes together (e.g. 8g)")
	f.Float64Var(&q.cpus, "cpus", 0, "vCPU limits of those sandboxes together")
	f.StringVar(&q.snapshots, "snapshot-bytes", "", "size of the tenant's snapshots together (e.g. 20g)")
	f.StringVar(&q.vols, "volume-bytes", "", "sizes of the tenant's volumes together (e.g. 100g)")
	f.IntVar(&q.pools, "pools", 0, "warm pools")
	f.IntVar(&q.creates, "creates-per-minute", 0, "creates, restores and fork copies in any minute")
}

// apply sets in q the limits whose flags were given.
func (q *quotaFlags) apply(f *pflag.FlagSet, to *sandbox.Quota) error {
	bytes := func(name, v string, dst *int64) error {
		if !f.Changed(name) {
			return nil
		}
		n, err := units.ParseBytes(v)
		if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		*dst = n
		return nil
	}
	if f.Changed("sandboxes") {
		to.Sandboxes = q.sandboxes
	}
	if f.Changed("cpus") {
		to.CPUs = q.cpus
	}
	if f.Changed("pools") {
		to.Pools = q.pools
	}
	if f.Changed("creates-per-minute") {
		to.CreatesPerMinute = q.creates
	}
	if err := bytes("memory", q.memory, &to.Memory); err != nil {
		return err
	}
	if err := bytes("snapshot-bytes", q.snapshots, &to.SnapshotBytes); err != nil {
		return err
	}
	return bytes("volume-bytes", q.vols, &to.VolumeBytes)
}

// quotaText describes q, "none" for no limits.
func quotaText(q sandbox.Quota) string {
	var parts []string
	add := func(ok bool, s string) {
		if ok {
			parts = append(parts, s)
		}
	}
	add(q.Sandboxes > 0, fmt.Sprintf("sandboxes=%d", q.Sandboxes))
	add(q.Memory > 0, "memory="+units.FormatBytes(q.Memory))
	add(q.CPUs > 0, fmt.Sprintf("cpus=%g", q.CPUs))
	add(q.SnapshotBytes > 0, "snapshot-bytes="+units.FormatBytes(q.SnapshotBytes))
	add(q.VolumeBytes > 0, "volume-bytes="+units.FormatBytes(q.VolumeBytes))
	add(q.Pools > 0, fmt.Sprintf("pools=%d", q.Pools))
	add(q.CreatesPerMinute > 0, fmt.Sprintf("creates-per-minute=%d", q.CreatesPerMinute))
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

func (a *app) tenantAddCmd() *cobra.Command {
	var qf quotaFlags
	c := &cobra.Command{
		Use:   "add NAME [quota flags]",
		Short: "Add a tenant (then give it a key with smolvm tenant key add)",
		Args:  cobra.ExactArgs(1),
	}
	qf.register(c.Flags())
	return command(a, c, "print JSON", printLine(func(t *sandbox.Tenant) string {
		return fmt.Sprintf("Added tenant %s (quota: %s)", t.Name, quotaText(t.Quota))
	}), on((*session).tenants, func(s *session, ts *tenant.Store, args []string) (*sandbox.Tenant, error) {
		var q sandbox.Quota
		if err := qf.apply(s.cmd.Flags(), &q); err != nil {
			return nil, err
		}
		return ts.Add(s.ctx, args[0], q)
	}))
}

func (a *app) tenantLsCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "ls",
		Short: "List tenants, their keys (IDs only) and quotas",
		Args:  cobra.NoArgs,
	}, "print JSON", func(w io.Writer, ts []*sandbox.Tenant) error {
		return table(w, "NAME\tKEYS\tQUOTA", func(tw io.Writer) {
			for _, t := range ts {
				ids := make([]string, len(t.Keys))
				for i, k := range t.Keys {
					ids[i] = k.ID
				}
				keys := strings.Join(ids, ",")
				if keys == "" {
					keys = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, keys, quotaText(t.Quota))
			}
		})
	}, on((*session).tenants, func(s *session, ts *tenant.Store, _ []string) ([]*sandbox.Tenant, error) {
		return ts.List(s.ctx)
	}))
}

func (a *app) tenantRmCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a tenant and revoke its keys at once (what it owns stays, for the admin)",
		Args:  cobra.ExactArgs(1),
	}, "", printLine(func(name string) string { return "Removed tenant " + name }),
		on((*session).tenants, func(s *session, ts *tenant.Store, args []string) (string, error) {
			return args[0], ts.Remove(s.ctx, args[0])
		}))
}

func (a *app) tenantQuotaCmd() *cobra.Command {
	var qf quotaFlags
	c := &cobra.Command{
		Use:   "quota NAME [quota flags]",
		Short: "Show a tenant's quota, or change the limits given (0: no limit)",
		Args:  cobra.ExactArgs(1),
	}
	qf.register(c.Flags())
	return command(a, c, "print JSON", printLine(func(t *sandbox.Tenant) string {
		return t.Name + ": " + quotaText(t.Quota)
	}), on((*session).tenants, func(s *session, ts *tenant.Store, args []string) (*sandbox.Tenant, error) {
		t, err := ts.Get(s.ctx, args[0])
		if err != nil || s.cmd.Flags().NFlag() == 0 {
			return t, err
		}
		q := t.Quota
		if err := qf.apply(s.cmd.Flags(), &q); err != nil {
			return nil, err
		}
		return ts.SetQuota(s.ctx, args[0], q)
	}))
}

func (a *app) tenantKeyAddCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "add TENANT",
		Short: "Make an API key for a tenant; it is printed this once, and only its hash is kept",
		Args:  cobra.ExactArgs(1),
	}, "print JSON", printLine(func(k api.NewKey) string {
		return fmt.Sprintf("%s\n(key %s of tenant %s: shown only now; send it as Authorization: Bearer or X-API-KEY)", k.Key, k.ID, k.Tenant)
	}), on((*session).tenants, func(s *session, ts *tenant.Store, args []string) (api.NewKey, error) {
		k, secret, err := ts.AddKey(s.ctx, args[0])
		return api.NewKey{TenantKey: k, Tenant: args[0], Key: secret}, err
	}))
}

func (a *app) tenantKeyRmCmd() *cobra.Command {
	return command(a, &cobra.Command{
		Use:   "rm TENANT KEY-ID",
		Short: "Revoke a tenant's key; a running smolvm serve refuses it from the next request",
		Args:  cobra.ExactArgs(2),
	}, "", printLine(func(id string) string { return "Revoked key " + id }),
		on((*session).tenants, func(s *session, ts *tenant.Store, args []string) (string, error) {
			return args[1], ts.RemoveKey(s.ctx, args[0], args[1])
		}))
}

func (a *app) usageCmd() *cobra.Command {
	var (
		only, since, by string
	)
	c := &cobra.Command{
		Use:   "usage [--tenant T] [--since D] [--by tenant|sandbox|label]",
		Short: "What each tenant's sandboxes used: running time, CPU, memory, snapshot storage, egress",
		Long: "Usage as smolvm serve accounts it (every few seconds, and at each pause and stop), in\n" +
			"whole hours from --since (a duration back from now, or an RFC 3339 time; default 30 days).",
		Args: cobra.NoArgs,
	}
	f := c.Flags()
	f.StringVar(&only, "tenant", "", "only this tenant (\"\" for all; the admin's own sandboxes are tenant \"\")")
	f.StringVar(&since, "since", "", "start: a duration back from now (24h) or an RFC 3339 time")
	f.StringVar(&by, "by", "tenant", "break down by tenant, by sandbox, or by label (a row per key=value)")
	return command(a, c, "print JSON", func(w io.Writer, us []sandbox.Usage) error {
		return table(w, "TENANT\tSANDBOX\tLABEL\tSANDBOX-S\tCPU-S\tMEM-GIB-S\tSNAP-GIB-H\tEGRESS", func(tw io.Writer) {
			for _, u := range us {
				name := u.Tenant
				if name == "" {
					name = tenant.Admin
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.2f\t%.1f\t%.4f\t%s\n", name, orDash(u.Sandbox), orDash(u.Label), u.SandboxSeconds, u.CPUSeconds, u.MemoryGiBSeconds, u.SnapshotGiBHours, units.FormatBytes(u.EgressBytes))
			}
		})
	}, on((*session).runtime, func(s *session, e *env, _ []string) ([]sandbox.Usage, error) {
		if by != sandbox.UsageByTenant && by != sandbox.UsageBySandbox && by != sandbox.UsageByLabel {
			return nil, fmt.Errorf("--by %q: want tenant, sandbox or label", by)
		}
		from, err := units.ParseSince(since, time.Now())
		if err != nil {
			return nil, fmt.Errorf("--since: %w", err)
		}
		if only == tenant.Admin {
			only = ""
		}
		return e.mgr.Usage(s.ctx, from, only, by)
	}))
}
