package manager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestNetFromTrustPolicy: a sandbox under a trust policy gets the policy's
// [net] allow-list as its network, enforced outside the sandbox, and a
// wider network than the policy allows is refused.
func TestNetFromTrustPolicy(t *testing.T) {
	m, _ := newNetManager(t)
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755)
	os.WriteFile(filepath.Join(repo, ".smolvm", "policy.toml"), []byte(`
default = "deny"
[run]
allow = ["sh", "curl", "cat"]
[net]
allow = ["allowed.test", "*.allowed.test"]
deny = ["evil.allowed.test"]
`), 0o644)

	sb := m.run(t, sandbox.Config{TrustRepo: repo})
	if sb.Config.Network == nil || sb.Config.Network.Mode != sandbox.NetEgress || strings.Join(sb.Config.Network.Hosts, ",") != "allowed.test" {
		t.Fatalf("network from the policy: %+v; want egress to allowed.test only (the wildcard holds a deny)", sb.Config.Network)
	}
	expectFetch(t, m, sb, "internet", "http://allowed.test/")
	expectFetch(t, m, sb, "ERR 6", "http://www.allowed.test/")
	expectFetch(t, m, sb, "ERR 6", "http://other.test/")

	for _, n := range []*sandbox.Network{
		{Mode: sandbox.NetFull},
		{Mode: sandbox.NetEgress, Hosts: []string{"other.test"}},
		{Mode: sandbox.NetEgress, Hosts: []string{"*.allowed.test"}},
	} {
		_, err := m.Create(t.Context(), sandbox.CreateOptions{Config: sandbox.Config{TrustRepo: repo, Network: n}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "trust policy") {
			t.Errorf("create with %+v under the policy: %v", n, err)
		}
	}
	// Narrower is fine.
	if _, err := m.Create(t.Context(), sandbox.CreateOptions{Config: sandbox.Config{TrustRepo: repo, Network: &sandbox.Network{Mode: sandbox.NetNone}}}); err != nil {
		t.Errorf("--net none under the policy: %v", err)
	}
}
