package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultBackend: config.json's backend is the default, SMOLVM_BACKEND
// overrides it, and a config that does not parse or names no backend is
// an error naming the file.
func TestDefaultBackend(t *testing.T) {
	t.Setenv("SMOLVM_BACKEND", "")
	a := &app{dataDir: t.TempDir()}
	check := func(config, env, want, wantErr string) {
		t.Helper()
		os.Remove(configFile(a.dataDir))
		if config != "" {
			if err := os.WriteFile(configFile(a.dataDir), []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("SMOLVM_BACKEND", env)
		got, err := a.defaultBackend()
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), filepath.Join(a.dataDir, "config.json")) {
				t.Fatalf("config %q: %q, %v; want an error with %q and the file's name", config, got, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("config %q, SMOLVM_BACKEND=%q: %q, %v; want %q", config, env, got, err, want)
		}
	}
	check("", "", "gvisor", "")
	check(`{"backend": "vm"}`, "", "vm", "")
	check(`{"backend": "gvisor"}`, "", "gvisor", "")
	check(`{}`, "", "gvisor", "")
	check(`{"backend": "vm"}`, "gvisor", "gvisor", "")
	check(`{"backend": "firecracker"}`, "", "", `backend "firecracker"`)
	check(`{"backend": "vm"`, "", "", "unexpected EOF")
	check(`{"bakend": "vm"}`, "", "", `unknown field "bakend"`)
}
