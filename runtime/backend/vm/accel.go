package vm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// kvmCreateVM is the KVM_CREATE_VM ioctl, _IO(KVMIO, 0x01).
const kvmCreateVM = 0xae01

// pvmModule is there when the host's KVM is PVM, a KVM that runs guests
// by shadow paging and instruction emulation on cloud VMs without
// hardware virtualization. It serves /dev/kvm and creates VMs, but an
// unmodified guest kernel does not boot on it: QEMU's default CPU aborts
// on an MSR write ("failed to set MSR 0x10a"), and with that MSR off the
// guest dies in its slab allocator on a cmpxchg16b that PVM cannot
// emulate ("KVM internal error. Suberror: 1", "kvm-pvm: INTERNAL_ERROR in
// batch emul" in the host's log) or, without cmpxchg16b, spins.
const pvmModule = "/sys/module/kvm_pvm"

// ProbeKVM reports why KVM cannot be used here, or nil if it can: it
// opens /dev/kvm and creates a VM, since the device node exists on hosts
// whose CPU cannot run one, and refuses PVM (see pvmModule).
func ProbeKVM() error {
	if _, err := os.Stat(pvmModule); err == nil {
		return errors.New("/dev/kvm is PVM (kvm_pvm), which does not boot an unmodified guest kernel")
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), kvmCreateVM, 0)
	if errno != 0 {
		return fmt.Errorf("KVM_CREATE_VM: %w", errno)
	}
	unix.Close(int(fd))
	return nil
}

// errNoKVM is the error for a configuration that demands KVM on a host
// without it.
var errNoKVM = errors.New("KVM is not usable on this host")

// chooseAccel picks the accelerator and CPU model for want ("", "kvm" or
// "tcg") given what the KVM probe said. With KVM the guest gets the
// host's CPU; under TCG, "max", the one CPU model microvm boots
// reliably with.
func chooseAccel(want string, kvm error) (accel, cpu string, err error) {
	switch want {
	case "":
		if kvm == nil {
			return AccelKVM, "host", nil
		}
		return AccelTCG, "max", nil
	case AccelKVM:
		if kvm != nil {
			return "", "", fmt.Errorf("%w: %v", errNoKVM, kvm)
		}
		return AccelKVM, "host", nil
	case AccelTCG:
		return AccelTCG, "max", nil
	}
	return "", "", fmt.Errorf("unknown accelerator %q (want kvm or tcg)", want)
}
