package gvisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/testenv"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// hostRoot builds a minimal root that borrows the host's /usr read-only.
func hostRoot(t *testing.T) backend.Rootfs {
	dir := t.TempDir()
	for _, d := range []string{"etc", "proc", "dev", "sys", "tmp", "root", "usr"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/tmp:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\nsandbox:x:1000:\n"), 0o644)
	return backend.Rootfs{LowerDirs: []string{dir}, Mounts: []backend.Mount{{Source: "/usr", Destination: "/usr"}}}
}

func newSandbox(t *testing.T) (*Backend, *backend.Spec) {
	b, err := New(Config{Runsc: testenv.Runsc(t)})
	if err != nil {
		t.Fatal(err)
	}
	id := "t" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	spec := &backend.Spec{
		ID: id, Hostname: "sb", Dir: filepath.Join(t.TempDir(), id),
		Rootfs:      hostRoot(t),
		Env:         []string{"PATH=/usr/bin:/bin", "GREETING=hi"},
		Limits:      sandbox.Limits{Memory: 512 << 20, Pids: 128, Disk: 64 << 20},
		GuestBinary: testenv.Guest(t),
	}
	ctx := context.Background()
	t.Cleanup(func() { b.Delete(context.Background(), spec) })
	if err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	return b, spec
}

func run(t *testing.T, b *Backend, s *backend.Spec, stdin string, args ...string) (string, string, sandbox.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	io := sandbox.Stdio{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		io.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := b.Exec(ctx, s, sandbox.Process{Args: args}, io)
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return out.String(), errb.String(), exit
}

func TestLifecycle(t *testing.T) {
	b, s := newSandbox(t)
	ctx := context.Background()
	if st, err := b.State(ctx, s); err != nil || st != backend.StatusRunning {
		t.Fatalf("state = %v, %v; want running", st, err)
	}
	out, errOut, exit := run(t, b, s, "", "sh", "-c", "echo out $GREETING; echo err >&2; exit 3")
	if out != "out hi\n" || errOut != "err\n" || exit.Code != 3 {
		t.Fatalf("got out=%q err=%q exit=%+v", out, errOut, exit)
	}
	out, _, _ = run(t, b, s, "from stdin", "cat")
	if out != "from stdin" {
		t.Fatalf("stdin round trip: %q", out)
	}
	if _, _, exit := run(t, b, s, "", "no-such-command"); exit.Code != 127 || exit.Kind != sandbox.KindNotFound {
		t.Fatalf("missing command: %+v", exit)
	}
	if _, _, exit := run(t, b, s, "", "/etc/passwd"); exit.Code != 126 {
		t.Fatalf("non-executable: %+v", exit)
	}
	if out, _, _ := run(t, b, s, "", "uname", "-a"); !strings.Contains(out, "sb") {
		t.Fatalf("uname: %q", out)
	}
	if err := b.Stop(ctx, s, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.State(ctx, s); st != backend.StatusStopped {
		t.Fatalf("state after stop = %v", st)
	}
	if err := b.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir left after delete: %v", err)
	}
}
