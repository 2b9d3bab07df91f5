package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/vm"
)

// vmBackend opens the microVM backend, its kernels and disks cached in
// the data dir.
func (a *app) vmBackend() (*vm.Backend, error) {
	return vm.New(vm.Config{Cache: filepath.Join(a.dataDir, "vm"), Kernel: a.kernel, Accel: a.accel, Warn: a.warn})
}

// warn prints a warning on stderr.
func (a *app) warn(msg string) { fmt.Fprintln(a.stderr, "smolvm: warning: "+msg) }

// hostConfig is the data dir's config.json: this host's defaults, such
// as {"backend": "vm"}.
type hostConfig struct {
	// Backend runs sandboxes that name none: "gvisor" or "vm".
	Backend string `json:"backend,omitempty"`
}

// configFile is the host's config file in a data dir.
func configFile(dataDir string) string { return filepath.Join(dataDir, "config.json") }

// hostConfig reads the data dir's config.json; none is the zero config.
// A file that does not parse, or names what does not exist, is an error:
// a typo must not silently run sandboxes on another backend.
func (a *app) hostConfig() (hostConfig, error) {
	var c hostConfig
	path := configFile(a.dataDir)
	p, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(p))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	switch c.Backend {
	case "", "gvisor", "vm":
	default:
		return c, fmt.Errorf("config %s: backend %q: want gvisor or vm", path, c.Backend)
	}
	return c, nil
}

// defaultBackend runs sandboxes that name none: SMOLVM_BACKEND, else
// config.json's backend, else gvisor, which runs anywhere. A sandbox's
// --backend overrides it.
func (a *app) defaultBackend() (string, error) {
	if b := os.Getenv("SMOLVM_BACKEND"); b != "" {
		return b, nil
	}
	c, err := a.hostConfig()
	if err != nil {
		return "", err
	}
	if c.Backend != "" {
		return c.Backend, nil
	}
	return "gvisor", nil
}

// addVM adds the microVM backend to bs where it works. It is required
// only when it is the default (def) or an accelerator is asked for; a
// host without QEMU otherwise runs gVisor alone (smolvm doctor says why).
func (a *app) addVM(bs []backend.Backend, def string) ([]backend.Backend, error) {
	vb, err := a.vmBackend()
	if err != nil {
		if def == "vm" || a.accel != "" {
			return nil, err
		}
		return bs, nil
	}
	return append(bs, vb), nil
}
