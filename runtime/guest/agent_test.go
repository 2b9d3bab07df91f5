package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// startAgent runs the agent in-process on a temporary socket. It exercises
// the same code as in a sandbox, minus the isolation.
func startAgent(t *testing.T, main *sandbox.Process, opts ...func(*Config)) (*Client, Config) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		Socket:     filepath.Join(dir, "agent.sock"),
		Env:        []string{"PATH=/usr/bin:/bin", "BASE=1"},
		Main:       main,
		LogFile:    filepath.Join(dir, "main.log"),
		ExitFile:   filepath.Join(dir, "exit.json"),
		ResumeFile: filepath.Join(dir, "resume.json"),
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go Serve(ctx, cfg)
	c := NewClient(UnixDialer(cfg.Socket))
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := c.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

func execIO(t *testing.T, c *Client, stdin string, p sandbox.Process) (string, string, sandbox.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	io := sandbox.Stdio{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		io.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exit, err := c.Exec(ctx, p, io)
	if err != nil {
		t.Fatalf("exec %v: %v", p.Args, err)
	}
	return out.String(), errb.String(), exit
}

func TestExecSequence(t *testing.T) {
	c, _ := startAgent(t, nil)
	for i := 0; i < 20; i++ {
		out, errOut, exit := execIO(t, c, "", sandbox.Process{Args: []string{"sh", "-c", "echo a $BASE $X; echo b >&2; exit 3"}, Env: []string{"X=2"}})
		if out != "a 1 2\n" || errOut != "b\n" || exit.Code != 3 {
			t.Fatalf("run %d: out=%q err=%q exit=%+v", i, out, errOut, exit)
		}
		out, _, exit = execIO(t, c, "hello", sandbox.Process{Args: []string{"cat"}})
		if out != "hello" || exit.Code != 0 {
			t.Fatalf("run %d: cat out=%q exit=%+v", i, out, exit)
		}
	}
}

func TestQuiesceResume(t *testing.T) {
	c, cfg := startAgent(t, nil)
	ctx := context.Background()
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err == nil {
		t.Fatal("agent still answers while quiesced")
	}
	id, _ := json.Marshal(Identity{Env: []string{"PATH=/usr/bin:/bin", "WHO=copy"}})
	if err := os.WriteFile(cfg.ResumeFile, id, 0o644); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	out, _, _ := execIO(t, c, "", sandbox.Process{Args: []string{"sh", "-c", "echo $WHO $BASE"}})
	if out != "copy\n" {
		t.Fatalf("after resume the env is %q, want the new identity's", out)
	}
	if _, err := os.Stat(cfg.ResumeFile); !os.IsNotExist(err) {
		t.Fatal("resume file not consumed")
	}
}

// TestQuiesceTimeout: a host that quiesced the agent and died leaves it
// serving again, as itself, after the timeout; an identity it left behind
// does not end the next quiesce early.
func TestQuiesceTimeout(t *testing.T) {
	c, cfg := startAgent(t, nil, func(c *Config) { c.QuiesceTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	id, _ := json.Marshal(Identity{Env: []string{"PATH=/usr/bin:/bin", "WHO=stale"}})
	if err := os.WriteFile(cfg.ResumeFile, id, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.Ping(ctx); err == nil {
		t.Fatal("a stale identity ended the quiesce")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("served again after %v, before the timeout", d)
	}
	out, _, _ := execIO(t, c, "", sandbox.Process{Args: []string{"sh", "-c", "echo $WHO $BASE"}})
	if out != "1\n" {
		t.Fatalf("after the timeout the env is %q, want the agent's own", out)
	}
}

func TestBackgroundJobOutlivesExec(t *testing.T) {
	c, _ := startAgent(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The job's output goes elsewhere, as a shell's background job's would.
	execIO(t, c, "", sandbox.Process{Args: []string{"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > " + pidFile}})
	time.Sleep(100 * time.Millisecond) // past the exec's end and its connection's close
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGKILL)
	// A killed job may linger as a zombie until its new parent reaps it.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || strings.Contains(string(stat), ") Z ") {
		t.Fatalf("the background job died with its exec: %q %v", stat, err)
	}
}

// A command that reads no stdin still gets its signals: input it ignores
// must not stall the agent's frame loop (and a kill with it).
func TestSignalPastUnreadStdin(t *testing.T) {
	c, _ := startAgent(t, nil)
	sigs := make(chan syscall.Signal, 1)
	done := make(chan sandbox.Exit, 1)
	go func() {
		exit, err := c.Exec(context.Background(), sandbox.Process{Args: []string{"sleep", "100"}},
			sandbox.Stdio{Stdin: bytes.NewReader(make([]byte, 2<<20)), Signals: sigs})
		if err != nil {
			t.Error(err)
		}
		done <- exit
	}()
	time.Sleep(500 * time.Millisecond) // the input is sent, and stuck in front of the pipe
	sigs <- syscall.SIGKILL
	select {
	case exit := <-done:
		if exit.Signal != int(syscall.SIGKILL) {
			t.Fatalf("exit %+v, want killed", exit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a SIGKILL sent after 2 MiB of unread stdin never arrived")
	}
}

// TestExecNamesMissingDir: a command whose working directory is missing
// or a file fails naming the directory, not the program (os/exec says
// "fork/exec /bin/sh: no such file or directory" for a failed chdir).
func TestExecNamesMissingDir(t *testing.T) {
	c, _ := startAgent(t, nil)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	for dir, want := range map[string]string{
		"/no/such/dir": "working directory /no/such/dir: no such file or directory",
		file:           "working directory " + file + ": not a directory",
	} {
		_, _, exit := execIO(t, c, "", sandbox.Process{Args: []string{"sh", "-c", "true"}, Dir: dir})
		if exit.Error != want || exit.Code == 0 {
			t.Errorf("exec in %s: %+v; want an error %q", dir, exit, want)
		}
	}
	if out, _, exit := execIO(t, c, "", sandbox.Process{Args: []string{"pwd"}, Dir: "/tmp"}); out != "/tmp\n" || exit.Code != 0 {
		t.Fatalf("exec in /tmp: %q %+v", out, exit)
	}
}

// TestListFileIsInvalid: listing a file is the caller's wrong path
// (KindInvalid), as envd's ListDir answers it, not an I/O failure.
func TestListFileIsInvalid(t *testing.T) {
	c, _ := startAgent(t, nil)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	_, err := c.List(context.Background(), file, 1)
	if sandbox.ErrorKind(err) != sandbox.KindInvalid {
		t.Fatalf("list of a file: %v (kind %q); want kind %q", err, sandbox.ErrorKind(err), sandbox.KindInvalid)
	}
}
