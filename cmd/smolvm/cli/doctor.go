package cli

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/runtime/backend/vm"
	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/runtime/volume"
)

// check is one line of doctor's report.
type check struct {
	name, status, detail string // status: ok, warn, fail
}

func (a *app) doctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Say what works on this host and what to install",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			checks := a.doctorChecks()
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			failed := false
			for _, c := range checks {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(c.status), c.name, c.detail)
				failed = failed || c.status == "fail"
			}
			tw.Flush()
			if failed {
				return exitCode(1)
			}
			return nil
		},
	}
}

func (a *app) doctorChecks() []check {
	var cs []check
	add := func(name, status, detail string) { cs = append(cs, check{name, status, detail}) }

	if os.Geteuid() == 0 {
		add("privileges", "ok", "running as root")
	} else {
		add("privileges", "fail", "smolvm needs root to create sandboxes (namespaces, cgroups, mounts): run it as root")
	}
	var u unix.Utsname
	unix.Uname(&u)
	add("kernel", "ok", fmt.Sprintf("%s %s", unix.ByteSliceToString(u.Release[:]), runtime.GOARCH))

	if p, err := a.runscPath(); err != nil {
		add("runsc (gVisor)", "fail", err.Error())
	} else if static, err := isStatic(p); err != nil {
		add("runsc (gVisor)", "fail", fmt.Sprintf("%s: %v", p, err))
	} else if !static {
		add("runsc (gVisor)", "fail", p+" is dynamically linked and fails inside its chroot; rebuild with CGO_ENABLED=0 (scripts/install.sh)")
	} else {
		add("runsc (gVisor)", "ok", p+" (static, systrap platform: no KVM needed)")
		if err := gvisor.CheckControl(p); err != nil {
			add("runsc control socket", "warn", err.Error())
		} else {
			add("runsc control socket", "ok", "checkpoint, restore into targets, pause, resume and start skip the runsc CLI")
		}
	}
	if p, err := guestBinary(); err != nil {
		add("smolvm-guest", "fail", err.Error())
	} else if static, err := isStatic(p); err != nil || !static {
		add("smolvm-guest", "fail", p+" must be a static binary (CGO_ENABLED=0)")
	} else {
		add("smolvm-guest", "ok", p)
	}

	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		add("cgroups", "ok", "v2 (unified)")
	case fileExists("/sys/fs/cgroup/memory"):
		add("cgroups", "ok", "v1 (memory, cpu, pids limits)")
	default:
		add("cgroups", "fail", "no cgroup hierarchy mounted: limits cannot be enforced")
	}
	if fsSupported("overlay") {
		add("overlayfs", "ok", "multi-layer images")
	} else {
		add("overlayfs", "warn", "not available: only single-layer images run (modprobe overlay)")
	}
	if err := vm.ProbeKVM(); err == nil {
		add("kvm", "ok", "/dev/kvm creates VMs: the vm backend runs under KVM")
	} else {
		add("kvm", "warn", fmt.Sprintf("KVM unusable (%v): the vm backend falls back to TCG emulation, slow, for tests", err))
	}
	if vb, err := a.vmBackend(); err != nil {
		add("vm backend", "warn", fmt.Sprintf("unavailable: %v (needs %s)", err, vm.Packages))
	} else {
		add("vm backend", "ok", "QEMU microvm under "+vb.Accel()+" (--backend vm)")
	}
	if err := network.Check(a.dataDir); err != nil {
		add("network", "warn", fmt.Sprintf("--net egress/full unavailable: %v (needs root, network namespaces, veth and nf_tables)", err))
	} else {
		add("network", "ok", "namespaces, veth and nftables: --net egress and --net full work")
	}
	if err := volume.Check(); err != nil {
		add("volumes", "warn", "unavailable: "+err.Error())
	} else {
		add("volumes", "ok", "mkfs.ext4, loop devices and ext4: smolvm volume create works")
	}
	if _, err := exec.LookPath("git"); err == nil {
		add("git", "ok", "for smolvm memory")
	} else {
		add("git", "warn", "not found: smolvm memory needs git (apt-get install git)")
	}
	if err := writable(a.dataDir); err != nil {
		add("data dir", "fail", fmt.Sprintf("%s: %v (set --data-dir or SMOLVM_DATA_DIR)", a.dataDir, err))
	} else {
		add("data dir", "ok", a.dataDir)
	}
	return cs
}

// isStatic reports whether the ELF file at p has no program interpreter.
func isStatic(p string) (bool, error) {
	f, err := elf.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func fsSupported(name string) bool {
	p, err := os.ReadFile("/proc/filesystems")
	return err == nil && strings.Contains(string(p), "\t"+name+"\n")
}

// writable checks that dir exists or can be made, and takes a file.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(filepath.Clean(f.Name()))
}
