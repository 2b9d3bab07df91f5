package gateway

import (
	"strings"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestVolumesRefused: volumes are a node's; a create through the gateway
// that asks for one (the native API's volumes, E2B's volumeMounts, which
// server/e2b passes on as the same) is refused by name, not served
// without it. E2B's volume routes answer 501 (TestGateway's BadInput).
func TestVolumesRefused(t *testing.T) {
	_, err := (&cluster{g: &Gateway{}}).spec(sandbox.CreateOptions{Image: "img", Start: true, Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "v", Path: "/v"}}}})
	if err == nil || !strings.HasPrefix(err.Error(), "volumes: not served") {
		t.Errorf("create with volumes: %v", err)
	}
}
