package manager

import (
	"context"
	"fmt"
	"path/filepath"

	"smolvm.dev/smolvm/sandbox"
)

// Gate admits sandboxes under a trust policy, and their commands: a
// sandbox's Config.Policy names the repository whose policy governs it.
// workflow/trust implements it (trust.Gates).
type Gate interface {
	// Network checks the policy of the repository at root (absolute) for
	// a sandbox being created under it and returns the sandbox's network:
	// want, if the policy allows all of it, or, for a nil want, the widest
	// network the policy allows outright (nil for none). A missing or
	// malformed policy, or a wider network, is sandbox.ErrInvalid.
	Network(root string, want *sandbox.Network) (*sandbox.Network, error)
	// Check returns nil once argv may run in sb: the policy allows it, or
	// a person approved it (Check blocks until then). Every decision is
	// audited. Any error refuses the command.
	Check(ctx context.Context, sb *sandbox.Sandbox, argv []string) error
}

// checkPolicy is the exec gateway: when the sandbox has a trust policy, a
// command runs only once the gate lets it.
func (m *Manager) checkPolicy(ctx context.Context, r *record, argv []string) error {
	if r.Config.TrustRepo == "" {
		return nil
	}
	if m.gate == nil {
		return fmt.Errorf("%w: %s is under the trust policy of %s, and this smolvm has no exec gate", sandbox.ErrInvalid, r.Name, r.Config.TrustRepo)
	}
	if err := m.gate.Check(ctx, &r.Sandbox, argv); err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	return nil
}

// policyConfig makes cfg.TrustRepo absolute and has the gate check the
// policy, so a typo is caught at create rather than at the first exec.
// The policy's [net] rules become the sandbox's network when none is
// given; without a network host, the sandbox simply has no network,
// which is narrower than any policy.
func (m *Manager) policyConfig(cfg *sandbox.Config) error {
	if m.gate == nil {
		return fmt.Errorf("%w: --policy: this smolvm has no exec gate", sandbox.ErrInvalid)
	}
	abs, err := filepath.Abs(cfg.TrustRepo)
	if err != nil {
		return err
	}
	n, err := m.gate.Network(abs, cfg.Network)
	if err != nil {
		return err
	}
	cfg.TrustRepo = abs
	if cfg.Network != nil || m.net != nil {
		cfg.Network = n
	}
	return nil
}
