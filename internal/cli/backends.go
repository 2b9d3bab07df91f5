package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/vm"
)

// vmBackend opens the microVM backend, its kernels and disks cached in
// the data dir.
func (a *app) vmBackend() (*vm.Backend, error) {
	return vm.New(vm.Config{Cache: filepath.Join(a.dataDir, "vm"), Kernel: a.kernel})
}

// defaultBackend is SMOLVM_BACKEND, or gvisor, which runs anywhere.
func defaultBackend() string { return envOr("SMOLVM_BACKEND", "gvisor") }

// addVM adds the microVM backend to bs where it works. It is required
// only when it is the default; a host without QEMU otherwise runs gVisor
// alone (smolvm doctor says why).
func (a *app) addVM(bs []backend.Backend) ([]backend.Backend, error) {
	vb, err := a.vmBackend()
	if err != nil {
		if defaultBackend() == "vm" {
			return nil, err
		}
		return bs, nil
	}
	if defaultBackend() == "vm" && vb.Accel() == vm.AccelTCG {
		fmt.Fprintln(os.Stderr, "smolvm: warning: no usable /dev/kvm: VMs run under TCG emulation, slowly (fine for tests)")
	}
	return append(bs, vb), nil
}
