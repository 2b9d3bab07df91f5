package vm

import (
	"context"
	"errors"
	"testing"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// TestRefusesVolumes: a sandbox with a volume is refused as unsupported
// before anything is built, rather than its volume copied into a disk.
func TestRefusesVolumes(t *testing.T) {
	b := &Backend{cfg: Config{Cache: t.TempDir()}}
	s := &backend.Spec{ID: "v1", Dir: t.TempDir(), Rootfs: backend.Rootfs{
		ImageID: "img", Layers: []backend.Layer{{Dir: t.TempDir()}},
		Mounts: []backend.Mount{{Source: t.TempDir(), Destination: "/data", Volume: true, Writable: true}},
	}}
	for op, f := range map[string]func(context.Context, *backend.Spec) error{"create": b.Create, "run": b.Run} {
		if err := f(context.Background(), s); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("%s with a volume: %v, want unsupported", op, err)
		}
	}
}
