package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/backendtest"
	"smolvm.dev/smolvm/tests/testenv"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		b, err := New(Config{Runsc: testenv.Runsc(t)})
		if err != nil {
			t.Fatal(err)
		}
		return backendtest.Harness{Backend: b, Rootfs: hostRoot(t), GuestBinary: testenv.Guest(t)}
	})
}

// hostRoot builds a minimal root that borrows the host's /usr read-only.
func hostRoot(t *testing.T) backend.Rootfs {
	dir := t.TempDir()
	for _, d := range []string{"etc", "proc", "dev", "sys", "tmp", "root", "usr"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/tmp:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\nsandbox:x:1000:\n"), 0o644)
	return backend.Rootfs{ImageID: "test", Layers: []backend.Layer{{Dir: dir}}, Mounts: []backend.Mount{{Source: "/usr", Destination: "/usr"}}}
}
