// Package scripts tests the scripts a new user runs first.
package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/tests/testenv"
)

// demo runs demo.sh with the smolvm in bin (not installing) over a fresh
// data dir, and returns its output and error. It is killed, with all it
// started, after five minutes.
func demo(t *testing.T, bin string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "demo.sh")
	cmd.Env = append(os.Environ(),
		"SMOLVM_DEMO_NO_INSTALL=1", "PATH="+bin+":"+os.Getenv("PATH"), "SMOLVM_HOST=",
		"SMOLVM_RUNSC="+testenv.Runsc(t), "SMOLVM_GUEST_BINARY="+testenv.Guest(t), "SMOLVM_DATA_DIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("demo.sh:\n%s", out)
	if ctx.Err() != nil {
		t.Fatal("demo.sh did not end in five minutes")
	}
	return string(out), err
}

// smolvmBin returns a directory whose smolvm is the one under test.
func smolvmBin(t *testing.T) string {
	bin := t.TempDir()
	if err := os.Symlink(testenv.Smolvm(t), filepath.Join(bin, "smolvm")); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestDemo runs the demo as a user does and checks the lines that show
// what smolvm is for, so that it can never go silent.
func TestDemo(t *testing.T) {
	testenv.Runsc(t)
	out, err := demo(t, smolvmBin(t))
	if err != nil {
		t.Fatalf("demo.sh: %v", err)
	}
	host, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`Python 3\.\d+\.\d+ on (demo-\d+)\n`).FindStringSubmatch(out)
	if name == nil {
		t.Fatal("the demo ran no Python in a sandbox")
	}
	n := name[1]
	for _, want := range []string{
		`\[smolvm run: \d+ ms\]`,
		`processes visible: 1:\S+( \d+:\S+)+ \(`,
		`host file: No such file or directory\n`,
		`host loopback server: .+\n`,
		`   kernel: \S+`,
		`\n   total=42 pid=\d+ host=` + n + `\n`,
		`\[smolvm checkpoint: \d+ ms\]`,
		`\[smolvm restore: \d+ ms\]`,
		`\n   total=42 pid=\d+ host=` + n + `-restored\n`,
		`\[smolvm fork: \d+ ms\]`,
		n + `-copy-1, after adding 100: total=142 pid=\d+ host=` + n + `-copy-1\n`,
		n + `-copy-2, after adding 200: total=242 pid=\d+ host=` + n + `-copy-2\n`,
		n + `-copy-3, after adding 300: total=342 pid=\d+ host=` + n + `-copy-3\n`,
		n + `, the source, untouched: total=42 pid=\d+ host=` + n + `\n`,
		`\[smolvm rm: \d+ ms\]`,
		`\[smolvm snapshot rm: \d+ ms\]`,
		`\nNext: smolvm run [^\n]+\n$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the demo's output lacks %s", want)
		}
	}
	// The sandbox's kernel is gVisor's, not the host's.
	if regexp.MustCompile(`   kernel: ` + regexp.QuoteMeta(strings.TrimSpace(string(host))) + ` `).MatchString(out) {
		t.Error("the sandbox reports the host's kernel")
	}
}

// TestDemoFailsLoudly: a step that fails stops the demo with an error,
// as the isolation step's exec once failed unseen.
func TestDemoFailsLoudly(t *testing.T) {
	testenv.Runsc(t)
	bin := t.TempDir()
	wrapper := "#!/bin/sh\n" +
		"for a in \"$@\"; do [ \"$a\" = -i ] && { echo 'exec -i: broken for the test' >&2; exit 3; }; done\n" +
		"exec " + testenv.Smolvm(t) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "smolvm"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := demo(t, bin)
	if err == nil || !strings.Contains(out, "demo.sh: FAILED") || strings.Contains(out, "Next:") {
		t.Fatalf("a failed step: %v; want the demo to stop with FAILED", err)
	}
}
