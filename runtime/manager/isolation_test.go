package manager

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// TestIsolation is what a user would check before trusting a sandbox with
// untrusted code. Each subtest plants something on the host and shows the
// sandbox cannot get at it.
func TestIsolation(t *testing.T) {
	m := newManager(t)
	sb := m.run(t, sandbox.Config{})

	t.Run("cannot see host processes", func(t *testing.T) {
		out, _, _ := m.sh(t, sb, `ls /proc | grep -E '^[0-9]+$' | tr '\n' ' '`)
		pids := strings.Fields(out)
		if len(pids) == 0 || len(pids) > 10 {
			t.Fatalf("sandbox sees %d processes: %v", len(pids), pids)
		}
		self := strconv.Itoa(os.Getpid())
		if _, _, exit := m.sh(t, sb, "cat /proc/"+self+"/cmdline | grep -q sandbox.test"); exit.Code == 0 {
			t.Fatalf("sandbox can read the test process (host pid %s)", self)
		}
	})

	t.Run("cannot read a planted host file", func(t *testing.T) {
		secret := "smolvm-secret-" + strconv.Itoa(os.Getpid())
		paths := []string{filepath.Join(os.TempDir(), secret), "/root/." + secret, "/etc/" + secret}
		for _, p := range paths {
			if err := os.WriteFile(p, []byte(secret), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p)
		}
		for _, p := range paths {
			out, _, _ := m.sh(t, sb, "cat "+p+" 2>&1; grep -r "+secret+" /etc /root /tmp 2>/dev/null")
			if strings.Contains(out, secret+"\n") || strings.HasPrefix(out, secret) {
				t.Fatalf("sandbox read host file %s: %q", p, out)
			}
		}
		// The synthetic /etc holds no host secrets.
		if out, _, exit := m.sh(t, sb, "ls /etc/shadow /root/.ssh 2>&1"); exit.Code == 0 {
			t.Fatalf("host secrets visible: %s", out)
		}
	})

	t.Run("cannot reach a host loopback server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
				accepted <- struct{}{}
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		out, _, exit := m.sh(t, sb, fmt.Sprintf(`python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d), timeout=3)' 2>&1`, port))
		if exit.Code == 0 {
			t.Fatalf("sandbox connected to host loopback port %d", port)
		}
		select {
		case <-accepted:
			t.Fatal("host server accepted a connection from the sandbox")
		default:
		}
		if !strings.Contains(out, "refused") && !strings.Contains(out, "unreachable") {
			t.Logf("connect failed with: %s", out)
		}
	})

	t.Run("runs the sandbox kernel", func(t *testing.T) {
		var u unix.Utsname
		unix.Uname(&u)
		host := unix.ByteSliceToString(u.Version[:])
		out, _, _ := m.sh(t, sb, "uname -v; dmesg 2>/dev/null | head -n 1")
		if strings.Contains(out, host) {
			t.Fatalf("sandbox sees the host kernel %q", host)
		}
		if !strings.Contains(out, "gVisor") {
			t.Logf("uname/dmesg: %q", out)
		}
	})

	t.Run("writes do not leak into the image or the host", func(t *testing.T) {
		if _, errOut, exit := m.sh(t, sb, "echo leak > /etc/leak && echo leak > /leak && mkdir -p /usr/local/leak"); exit.Code == 0 {
			t.Fatalf("/usr is the host's: writing under it must fail (%s)", errOut)
		}
		if out, _, _ := m.sh(t, sb, "cat /etc/leak /leak"); out != "leak\nleak\n" {
			t.Fatalf("writes inside the sandbox did not stick: %q", out)
		}
		img, err := m.images.Get(t.Context(), sandbox.DefaultImage)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range m.images.Rootfs(img).LowerDirs {
			for _, f := range []string{"etc/leak", "leak"} {
				if _, err := os.Stat(filepath.Join(d, f)); err == nil {
					t.Fatalf("write reached the image layer %s", d)
				}
			}
		}
		for _, f := range []string{"/leak", "/etc/leak", "/usr/local/leak"} {
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("write reached the host at %s", f)
			}
		}
		other := m.run(t, sandbox.Config{})
		if out, _, exit := m.sh(t, other, "cat /etc/leak"); exit.Code == 0 {
			t.Fatalf("a second sandbox sees the first one's write: %q", out)
		}
	})

	t.Run("root inside gains no power over host files", func(t *testing.T) {
		// The only host directory the sandbox can write is its own run
		// dir. Root inside can put a setuid binary there, but the host
		// mount makes it inert: it neither runs nor elevates.
		if _, errOut, exit := m.sh(t, sb, "cp /usr/bin/id /.smolvm/run/suid && chmod 4755 /.smolvm/run/suid"); exit.Code != 0 {
			t.Fatalf("plant setuid file: %s", errOut)
		}
		p := filepath.Join(m.dir, "sandboxes", sb.ID, "run", "suid")
		var fs unix.Statfs_t
		if err := unix.Statfs(p, &fs); err != nil {
			t.Fatal(err)
		}
		if fs.Flags&unix.ST_NOSUID == 0 || fs.Flags&unix.ST_NOEXEC == 0 {
			t.Fatalf("run dir mount flags %#x lack nosuid/noexec", fs.Flags)
		}
		cmd := exec.Command(p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("host executed the sandbox's setuid file: %s", out)
		}
	})
}
