package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// testCLI runs smolvm command lines in-process the way Main does, with
// buffers for the standard streams: every CLI test goes through it.
// dataDir and runsc, when set, are given as --data-dir and --runsc; host
// is always given as --host, so that the shell's SMOLVM_HOST never sends a
// test to a server.
type testCLI struct {
	t       *testing.T
	dataDir string // "" for SMOLVM_DATA_DIR's or the default
	runsc   string // "" for SMOLVM_RUNSC's, or next to smolvm, or $PATH
	self    string // the smolvm binary for background work; "" for none
	host    string // a server for the sandbox commands; "" for direct
}

func newCLI(t *testing.T, dataDir string) *testCLI {
	return &testCLI{t: t, dataDir: dataDir}
}

// run returns stdout, stderr and the exit status of one command line.
func (c *testCLI) run(args ...string) (string, string, int) {
	return c.runIn("", args...)
}

// runIn is run with stdin.
func (c *testCLI) runIn(stdin string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, self: c.self}
	pre := []string{"--host", c.host}
	if c.dataDir != "" {
		pre = append(pre, "--data-dir", c.dataDir)
	}
	if c.runsc != "" {
		pre = append(pre, "--runsc", c.runsc)
	}
	// Not the test's context: cleanups run command lines after it ends.
	code := a.run(context.Background(), append(pre, args...))
	return out.String(), errb.String(), code
}

// must runs a command line that must succeed, and returns its stdout.
func (c *testCLI) must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("smolvm %v: exit %d: %s", args, code, errOut)
	}
	return out
}
