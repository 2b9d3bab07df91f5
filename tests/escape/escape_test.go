// Package escape runs an escape probe (probe.py) inside a default smolvm
// sandbox and fails if any attempt to reach the host, another sandbox or
// the network gets through. SECURITY.md cites each check by name.
package escape

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
)

//go:embed probe.py
var probe string

// checks is every attempt the probe makes; each must report.
var checks = []string{"host-files", "host-pids", "dev-mem", "dev-kvm", "block-devices", "mknod", "mount",
	"cgroup-release-agent", "ptrace-runtime", "raw-socket", "host-loopback", "cloud-metadata", "other-sandboxes",
	"module-loading", "bpf", "sysrq", "readonly-image"}

func TestEscape(t *testing.T) {
	env := testmgr.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	// Canaries on the host: a file outside every mount, a listener on the
	// host's loopback, and a path in the image (the host's /usr) the probe
	// tries to create.
	hostFile := filepath.Join(t.TempDir(), "escape-canary")
	if err := os.WriteFile(hostFile, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	imageFile := fmt.Sprintf("/usr/bin/smolvm-escape-%d", time.Now().UnixNano())
	t.Cleanup(func() { os.Remove(imageFile) })

	// Another sandbox, whose runsc is the one the probe tries to ptrace,
	// and the host's own addresses, which the probe must not reach.
	other, err := env.Manager.Create(ctx, sandbox.CreateOptions{Name: "other", Start: true, Config: sandbox.Config{Cmd: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifs {
			if ip, _, err := net.ParseCIDR(a.String()); err == nil && ip.To4() != nil && !ip.IsLoopback() {
				addrs = append(addrs, ip.String())
			}
		}
	}
	runscPid := runscOf(t, other.ID)

	sb, err := env.Manager.Create(ctx, sandbox.CreateOptions{Name: "probe", Start: true, Config: sandbox.Config{Cmd: []string{"sleep", "600"}}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	exit, err := env.Manager.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"python3", "-c", probe}, Env: []string{
		"ESCAPE_HOST_FILE=" + hostFile,
		"ESCAPE_HOST_MARK=" + filepath.Base(os.Args[0]),
		"ESCAPE_RUNSC_PID=" + strconv.Itoa(runscPid),
		"ESCAPE_HOST_PORT=" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		"ESCAPE_OTHER_ADDRS=" + strings.Join(addrs, " "),
		"ESCAPE_IMAGE_FILE=" + imageFile,
	}}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil || exit.Code != 0 {
		t.Fatalf("probe: %+v %v\n%s%s", exit, err, out.String(), errb.String())
	}
	got := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), " ")
		got[name] = rest
		t.Log(sc.Text())
	}
	for _, c := range checks {
		switch r, ok := got[c]; {
		case !ok:
			t.Errorf("%s: no report", c)
		case !strings.HasPrefix(r, "blocked:"):
			t.Errorf("%s: %s", c, r)
		}
	}
	// What the sandbox wrote never reaches the host.
	if _, err := os.Stat(imageFile); err == nil {
		t.Errorf("readonly-image: %s appeared on the host", imageFile)
	}
	if b, _ := os.ReadFile(hostFile); string(b) != "host" {
		t.Errorf("host-files: the canary changed: %q", b)
	}
}

// runscOf returns the host pid of a runsc process of sandbox id (its
// --root names the sandbox's directory).
func runscOf(t *testing.T, id string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmd, []byte("runsc")) && bytes.Contains(cmd, []byte(id)) {
			return pid
		}
	}
	t.Fatalf("no runsc process of sandbox %s", id)
	return 0
}
