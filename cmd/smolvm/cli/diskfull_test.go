package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCopyDiskFull fills a size-limited sandbox (--disk 32m) with smolvm
// cp: the copy fails with the disk's error, the file it would have
// replaced is unchanged, no partial file takes the space, and the
// sandbox works on. Both a new file and a replaced one.
func TestCopyDiskFull(t *testing.T) {
	c := newSandboxCLI(t)
	c.must("run", "-d", "--name", "full", "--disk", "32m", "--", "sleep", "600")
	src := t.TempDir()
	keep, big := filepath.Join(src, "keep"), filepath.Join(src, "big")
	if err := os.WriteFile(keep, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 48<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	c.must("cp", keep, "full:/keep")
	used := func() int {
		t.Helper()
		out := c.must("exec", "full", "--", "sh", "-c", "df -k / | tail -1 | awk '{print $3}'")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("df: %q", out)
		}
		return n
	}
	before := used()
	for _, dst := range []string{"full:/big", "full:/keep"} {
		_, errOut, code := c.run("cp", big, dst)
		if code == 0 || !strings.Contains(errOut, "no space left on device") {
			t.Errorf("cp of 48 MB to %s in a 32 MB sandbox: exit %d, %q", dst, code, errOut)
		}
		if after := used(); after > before+64 {
			t.Errorf("after the failed cp to %s, %d KiB more are used", dst, after-before)
		}
	}
	if out := c.must("exec", "full", "--", "sh", "-c", "cat /keep; ls -a / | grep -c smolvm- || true; test -e /big && echo big; true"); out != "kept\n0\n" {
		t.Errorf("after the failed copies: %q; want the old /keep, no temporary file, no /big", out)
	}
}
