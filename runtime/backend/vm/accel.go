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

// ProbeKVM reports why KVM cannot be used here, or nil if it can: it
// opens /dev/kvm and creates a VM, since the device node exists on hosts
// whose CPU cannot run one.
func ProbeKVM() error {
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
