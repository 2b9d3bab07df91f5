package gateway

import (
	"context"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/sandbox"
)

// TestVolumesRefused: volumes are a node's; a create through the gateway
// that asks for one is refused by name, not served without it.
func TestVolumesRefused(t *testing.T) {
	g := &Gateway{}
	_, err := g.e2bSpec(context.Background(), "ns", &e2bapi.CreateRequest{TemplateID: "base", VolumeMounts: []e2bapi.VolumeMount{{Name: "v", Path: "/v"}}})
	if err == nil || !strings.HasPrefix(err.Error(), "volumeMounts: not served") {
		t.Errorf("E2B create with volumeMounts: %v", err)
	}
	_, err = (&cluster{g: g}).spec(sandbox.CreateOptions{Image: "img", Start: true, Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "v", Path: "/v"}}}})
	if err == nil || !strings.HasPrefix(err.Error(), "volumes: not served") {
		t.Errorf("native create with volumes: %v", err)
	}
}
