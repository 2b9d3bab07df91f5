package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"smolvm.dev/smolvm/policy"
)

// checkPolicy is the exec gateway: when the sandbox has a trust policy, a
// command runs only once the policy allows it, or a person approves it.
// An ask blocks here until answered (smolvm approvals) or timed out. Every
// decision lands in the audit log.
func (m *Manager) checkPolicy(ctx context.Context, r *record, argv []string) error {
	if r.Config.Policy == "" {
		return nil
	}
	pol, err := policy.Load(r.Config.Policy)
	if err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	ledger, err := policy.OpenLedger(ctx, m.st)
	if err != nil {
		return err
	}
	gate := &policy.Gate{Policy: pol, Ledger: ledger}
	if err := gate.Check(ctx, policy.Action{Kind: policy.Run, Argv: argv}, "sandbox:"+r.Name); err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	return nil
}

// validPolicy checks that root holds a policy that parses, so a typo is
// caught at create rather than at the first exec.
func validPolicy(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(abs, policy.FileName)); err != nil {
		return "", fmt.Errorf("%w: --policy %s: %v", ErrInvalid, root, err)
	}
	if _, err := policy.Load(abs); err != nil {
		return "", fmt.Errorf("%w: --policy: %v", ErrInvalid, err)
	}
	return abs, nil
}
