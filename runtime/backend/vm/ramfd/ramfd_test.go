package ramfd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is also the supervised program: under launchEnv it
// execs itself through Exec, and under openEnv it opens the files named
// there read-write, as QEMU opens its RAM file, and says what it got.
const (
	launchEnv = "RAMFD_TEST_LAUNCH"
	openEnv   = "RAMFD_TEST_OPEN"
)

func TestMain(m *testing.M) {
	if os.Getenv(launchEnv) != "" {
		os.Unsetenv(launchEnv)
		fmt.Fprintln(os.Stderr, Exec([]string{os.Args[0]}))
		os.Exit(2)
	}
	if paths := os.Getenv(openEnv); paths != "" {
		for _, p := range strings.Split(paths, ":") {
			fmt.Println(opened(p))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// opened opens path as QEMU 7.2 opens a RAM file, and describes the file
// it got: its access mode, and whether a write to it works.
func opened(path string) string {
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	if err != nil {
		return "open: " + err.Error()
	}
	defer unix.Close(fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return "getfl: " + err.Error()
	}
	mode := map[int]string{unix.O_RDONLY: "rdonly", unix.O_RDWR: "rdwr"}[fl&unix.O_ACCMODE]
	_, werr := unix.Pwrite(fd, []byte("x"), 0)
	return fmt.Sprintf("%s write=%v", mode, werr)
}

// TestAnswer: a program started through Exec that opens a file
// read-write gets, for the path the supervisor answers, the supervisor's
// read-only file (a write fails); other paths open as the program asked.
func TestAnswer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("taking another process's listener needs root")
	}
	dir := t.TempDir()
	ram, other := filepath.Join(dir, "ram"), filepath.Join(dir, "other")
	for _, p := range []string{ram, other} {
		if err := os.WriteFile(p, []byte("snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), launchEnv+"=1", openEnv+"="+other+":"+ram)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if Started(os.Getpid()) {
		t.Error("the test reads as started through Exec")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := Take(ctx, cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("%v (stderr: %s)", err, stderr.String())
	}
	defer l.Close()
	if !Started(cmd.Process.Pid) {
		t.Error("the program reads as not started through Exec")
	}
	f, err := os.Open(ram)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := l.Answer(ctx, ram, f); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	want := "rdwr write=<nil>\nrdonly write=bad file descriptor\n"
	if out.String() != want {
		t.Fatalf("the program got %q, want %q", out.String(), want)
	}
	if p, _ := os.ReadFile(ram); string(p) != "snapshot" {
		t.Fatalf("the answered file was written: %q", p)
	}
}
