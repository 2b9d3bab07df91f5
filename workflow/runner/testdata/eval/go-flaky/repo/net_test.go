package fx

import (
	"os"
	"testing"
)

// TestNetworkish fails the first time it runs on a machine: a stand-in
// for a test that depends on timing or the network.
func TestNetworkish(t *testing.T) {
	if _, err := os.Stat("/tmp/fx-warm"); err != nil {
		os.WriteFile("/tmp/fx-warm", nil, 0o644)
		t.Fatal("connection reset by peer")
	}
}
