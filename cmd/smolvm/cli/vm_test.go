package cli

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"smolvm.dev/smolvm/runtime/backend/vm"
)

// needQEMU skips a test without QEMU, except in CI, which installs it.
func needQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("qemu-system-x86_64 not found in CI: scripts/test.sh installs it")
		}
		t.Skip("qemu-system-x86 not installed")
	}
}

// TestCLIVM: an image built from a Dockerfile (its RUN under gVisor)
// boots under --backend vm, the same build and no second recipe; the
// TCG warning shows once when a VM starts under TCG and never on a
// command that starts none, even with vm the default; --memory is the
// VM's RAM, of which the guest's kernel keeps a share (docs/vm.md); the
// host image is refused at once, naming the base image; --accel is
// checked.
func TestCLIVM(t *testing.T) {
	c := newSandboxCLI(t)
	needQEMU(t)
	const tcg = "TCG emulation"
	// A file one step deletes from another's layer: a whiteout, which
	// the VM's disk must honour as overlayfs does under gVisor.
	df := "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"echo built > /x; echo gone > /y\"]\n" +
		"RUN [\"/bin/busybox\", \"rm\", \"/y\"]\n"
	if _, errOut, code := c.runIn(df, "build", "-f", "-", "-t", "vmimg", "--net", "none", "--progress", "quiet", busyboxContext(t)); code != 0 {
		t.Fatalf("build: exit %d: %s", code, errOut)
	}
	underTCG := vm.ProbeKVM() != nil
	out, errOut, code := c.run("run", "--rm", "--backend", "vm", "--memory", "128m", "--image", "vmimg", "--",
		"/bin/busybox", "sh", "-c", "cat /x; [ -e /y ] || echo deleted; /bin/busybox awk '/MemTotal/ {print $2}' /proc/meminfo")
	lines := strings.Fields(out)
	if code != 0 || len(lines) != 3 || lines[0] != "built" || lines[1] != "deleted" {
		t.Fatalf("run --backend vm of a built image: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := strings.Count(errOut, tcg); underTCG && n != 1 {
		t.Errorf("a VM run under TCG warned %d times: %q", n, errOut)
	}
	// The guest's kernel keeps ~48 MiB of 128 (docs/vm.md says so).
	if kib, err := strconv.Atoi(lines[2]); err != nil || kib > 128<<10 || kib < 64<<10 {
		t.Errorf("MemTotal in a 128 MiB VM: %s KiB; want 64–128 MiB", lines[2])
	}

	t.Setenv("SMOLVM_BACKEND", "vm")
	if _, errOut, code := c.run("ls"); code != 0 || strings.Contains(errOut, "warning") {
		t.Errorf("ls with vm the default: exit %d, stderr %q; want no warning", code, errOut)
	}
	if _, errOut, code := c.run("run", "--rm", "--image", "host", "--", "true"); code != 125 || !strings.Contains(errOut, "smolvm image build base") || strings.Contains(errOut, tcg) {
		t.Errorf("run of the host image under vm: exit %d, stderr %q; want 125, naming the base image", code, errOut)
	}
	if _, errOut, code := c.run("--accel", "arm", "ls"); code != 125 || !strings.Contains(errOut, `unknown accelerator "arm"`) {
		t.Errorf("--accel arm: exit %d, stderr %q", code, errOut)
	}
	if underTCG {
		if _, errOut, code := c.run("--accel", "kvm", "ls"); code != 125 || !strings.Contains(errOut, "KVM is not usable") {
			t.Errorf("--accel kvm without KVM: exit %d, stderr %q", code, errOut)
		}
	}
}
