package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// checkPolicy is the exec gateway: when the sandbox has a trust policy, a
// command runs only once the policy allows it, or a person approves it.
// An ask blocks here until answered (smolvm approvals) or timed out. Every
// decision lands in the audit log.
func (m *Manager) checkPolicy(ctx context.Context, r *record, argv []string) error {
	if r.Config.Policy == "" {
		return nil
	}
	pol, err := trust.Load(r.Config.Policy)
	if err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	ledger, err := trust.OpenLedger(ctx, m.st)
	if err != nil {
		return err
	}
	gate := &trust.Gate{Policy: pol, Ledger: ledger}
	if err := gate.Check(ctx, trust.Action{Kind: trust.Run, Argv: argv}, "sandbox:"+r.Name); err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	return nil
}

// policyNetwork makes the trust policy's [net] rules the sandbox's network
// when none is given, or checks that the one given stays within them, so
// the policy's egress is enforced by the network layer, outside the
// sandbox. Without a network host, the sandbox simply has no network,
// which is narrower than any policy.
func (m *Manager) policyNetwork(cfg *sandbox.Config, pol *trust.Policy) error {
	eg := pol.Egress()
	n := cfg.Network
	if n == nil {
		switch {
		case m.net == nil:
		case eg.Any:
			cfg.Network = &sandbox.Network{Mode: sandbox.NetFull}
		case len(eg.Hosts)+len(eg.CIDRs) > 0:
			cfg.Network = &sandbox.Network{Mode: sandbox.NetEgress, Hosts: eg.Hosts, CIDRs: eg.CIDRs}
		}
		return nil
	}
	refuse := func(what string) error {
		return fmt.Errorf("%w: %s: the trust policy of %s does not allow it (smolvm policy explain net HOST)", sandbox.ErrInvalid, what, cfg.Policy)
	}
	if n.Mode == sandbox.NetFull && !eg.Any {
		return refuse("--net full")
	}
	for _, h := range n.Hosts {
		if !eg.Allows(h) {
			return refuse("--allow-host " + h)
		}
	}
	for _, c := range n.CIDRs {
		if !eg.Allows(c) {
			return refuse("--allow-cidr " + c)
		}
	}
	return nil
}

// validPolicy loads the policy root holds, so a typo is caught at create
// rather than at the first exec. It returns root made absolute.
func validPolicy(root string) (string, *trust.Policy, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", nil, err
	}
	if _, err := os.Stat(filepath.Join(abs, trust.FileName)); err != nil {
		return "", nil, fmt.Errorf("%w: --policy %s: %v", sandbox.ErrInvalid, root, err)
	}
	pol, err := trust.Load(abs)
	if err != nil {
		return "", nil, fmt.Errorf("%w: --policy: %v", sandbox.ErrInvalid, err)
	}
	return abs, pol, nil
}
