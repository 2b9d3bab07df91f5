package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestCLIVolume: volume create/ls/inspect/rm and run --volume, read-write
// then read-only, a remove refused while a sandbox mounts it, and bad
// flags.
func TestCLIVolume(t *testing.T) {
	c := newSandboxCLI(t)
	// Registered after newSandboxCLI's: runs first, before TempDir's.
	t.Cleanup(func() { c.run("volume", "rm", "-f", "cache") })
	if out := c.must("volume", "create", "--size", "16m", "cache"); out != "cache\n" {
		t.Fatalf("create: %q", out)
	}
	if out, _, code := c.run("run", "--rm", "-v", "cache:/c", "--", "sh", "-c", "echo one > /c/f && df -k /c | tail -1"); code != 0 || !strings.Contains(out, "/c") {
		t.Fatalf("run rw: %d %q", code, out)
	}
	c.must("run", "-d", "--name", "reader", "--volume", "cache:/c:ro")
	out, errOut, code := c.run("exec", "reader", "--", "sh", "-c", "cat /c/f; echo two > /c/f")
	if out != "one\n" || code == 0 || !strings.Contains(errOut, "Read-only") {
		t.Errorf("read-only: %q %q %d", out, errOut, code)
	}
	var vs []sandbox.Volume
	if err := json.Unmarshal([]byte(c.must("volume", "ls", "--json")), &vs); err != nil || len(vs) != 1 || vs[0].Size != 16<<20 || len(vs[0].UsedBy) != 1 || vs[0].UsedBy[0] != "reader" {
		t.Errorf("ls: %+v %v", vs, err)
	}
	if _, errOut, code := c.run("volume", "rm", "cache"); code != 125 || !strings.Contains(errOut, "in use by reader") {
		t.Errorf("rm in use: %d %q", code, errOut)
	}
	c.must("rm", "-f", "reader")
	if out := c.must("volume", "inspect", "cache"); !strings.Contains(out, `"used_by": []`) {
		t.Errorf("inspect: %s", out)
	}
	for _, args := range [][]string{
		{"volume", "create", "../up"},
		{"volume", "create", "--size", "1k", "small"},
		{"run", "--rm", "-v", "cache", "--", "true"},
		{"run", "--rm", "-v", "cache:/c:rx", "--", "true"},
		{"run", "--rm", "-v", "nope:/c", "--", "true"},
	} {
		if _, errOut, code := c.run(args...); code != 125 || errOut == "" {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}
	if out := c.must("volume", "rm", "cache"); out != "Removed cache\n" {
		t.Errorf("rm: %q", out)
	}
}
