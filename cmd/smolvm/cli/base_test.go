package cli

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"
)

// TestCLIBaseImage builds the base image with its one command (mmdebstrap
// from Debian's archive, ~4 minutes the first time; its root filesystem
// is then cached in testenv.Cache by recipe digest, as the browser
// image's is), and checks that a sandbox naming no image runs it, with
// its tools, under gVisor and booted under --backend vm.
func TestCLIBaseImage(t *testing.T) {
	c := newSandboxCLI(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mmdebstrap is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("mmdebstrap not installed (apt-get install mmdebstrap)")
	}
	if out := c.must("image", "build", "base", "--cache", testenv.Cache(t, "images")); !strings.HasPrefix(out, "Built docker.io/library/base:latest sha256:") {
		t.Fatalf("image build base: %q", out)
	}
	const script = "python3 -c 'print(6*7)'; node -e 'console.log(6*7)'; git --version; curl --version | head -n1; ls --version | head -n1; readlink -f /proc/self/exe"
	id := strings.TrimSpace(c.must("run", "-d", "--", "sleep", "600"))
	if out := c.must("inspect", id); !strings.Contains(out, `"image": "base"`) {
		t.Errorf("a sandbox naming no image: %s; want the base image", out)
	}
	checkTools := func(backend, out string) {
		t.Helper()
		for _, want := range []string{"42\n42\n", "git version ", "curl ", "(GNU coreutils)"} {
			if !strings.Contains(out, want) {
				t.Errorf("the base image under %s: %q lacks %q", backend, out, want)
			}
		}
	}
	checkTools("gvisor", c.must("exec", id, "--", "sh", "-c", script))
	needQEMU(t)
	checkTools("vm", c.must("run", "--rm", "--backend", "vm", "--", "sh", "-c", script))
}
