package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// newSandboxCLI runs command lines against a new data dir with real runsc
// sandboxes, and removes every sandbox left when the test ends.
func newSandboxCLI(t *testing.T) *testCLI {
	c := &testCLI{t: t, dataDir: t.TempDir(), runsc: testenv.Runsc(t)}
	t.Setenv("SMOLVM_GUEST_BINARY", testenv.Guest(t))
	t.Setenv("SMOLVM_HOST", "") // direct, whatever the caller's shell says
	t.Cleanup(func() {
		ids, _, _ := c.run("ls", "-q")
		for _, id := range strings.Fields(ids) {
			c.run("rm", "-f", id)
		}
	})
	return c
}

func TestCLIRunAndExec(t *testing.T) {
	c := newSandboxCLI(t)
	out, errOut, code := c.run("run", "--rm", "--", "sh", "-c", "echo hi; echo oops >&2; exit 5")
	if out != "hi\n" || errOut != "oops\n" || code != 5 {
		t.Fatalf("run: out %q err %q code %d", out, errOut, code)
	}
	if out := c.must("ls", "-q"); out != "" {
		t.Fatalf("--rm left %q", out)
	}

	c.must("run", "-d", "--name", "box", "--memory", "256m", "--cpus", "1", "--env", "X=1", "--timeout", "10m")
	out, errOut, code = c.run("exec", "box", "--", "sh", "-c", "echo $X; echo e >&2; exit 7")
	if out != "1\n" || errOut != "e\n" || code != 7 {
		t.Fatalf("exec: out %q err %q code %d", out, errOut, code)
	}
	if out, _, code := c.runIn("from stdin", "exec", "-i", "box", "--", "cat"); out != "from stdin" || code != 0 {
		t.Fatalf("exec -i: %q %d", out, code)
	}
	if out, _, code := c.run("exec", "-t", "box", "--", "sh", "-c", "test -t 1 && echo tty"); !strings.Contains(out, "tty") || code != 0 {
		t.Fatalf("exec -t: %q %d", out, code)
	}
	if _, errOut, code := c.run("exec", "box", "--", "no-such-cmd"); code != 127 || !strings.Contains(errOut, "not found") {
		t.Fatalf("missing command: %d %q", code, errOut)
	}
	if _, _, code := c.run("exec", "box", "--", "/etc/passwd"); code != 126 {
		t.Fatalf("not executable: %d", code)
	}

	var list []sandbox.Sandbox
	if err := json.Unmarshal([]byte(c.must("ls", "--json")), &list); err != nil || len(list) != 1 || list[0].Name != "box" || list[0].State != sandbox.StateRunning {
		t.Fatalf("ls --json: %v %+v", err, list)
	}
	table := c.must("ls")
	for _, want := range []string{"NAME", "box", "running", "gvisor", "256MiB", "left"} {
		if !strings.Contains(table, want) {
			t.Fatalf("ls table lacks %q:\n%s", want, table)
		}
	}
	if out := c.must("inspect", "box"); !strings.Contains(out, `"stats"`) || !strings.Contains(out, `"expires_at"`) {
		t.Fatalf("inspect: %s", out)
	}

	// cp both ways.
	src := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(src, []byte("data"), 0o644)
	c.must("cp", src, "box:/tmp/in.txt")
	dst := filepath.Join(t.TempDir(), "out.txt")
	c.must("cp", "box:/tmp/in.txt", dst)
	if b, _ := os.ReadFile(dst); string(b) != "data" {
		t.Fatalf("cp round trip: %q", b)
	}

	c.must("stop", "box")
	if _, errOut, code := c.run("exec", "box", "--", "true"); code != 125 || !strings.Contains(errOut, "stopped") {
		t.Fatalf("exec into stopped: %d %q", code, errOut)
	}
	c.must("rm", "box")
}

func TestCLILogs(t *testing.T) {
	c := newSandboxCLI(t)
	c.must("run", "-d", "--name", "job", "--", "sh", "-c", "echo one; sleep 0.3; echo two >&2")
	out, errOut, code := c.run("logs", "-f", "job")
	if out != "one\n" || errOut != "two\n" || code != 0 {
		t.Fatalf("logs -f: %q %q %d", out, errOut, code)
	}
	if out := c.must("ls"); !strings.Contains(out, "stopped (0)") {
		t.Fatalf("ls after exit:\n%s", out)
	}
}

// TestCLILogsReusedPID: a sandbox killed behind smolvm's back whose pid
// now belongs to another process is stopped: logs -f ends, ls says so,
// and rm kills nothing but the sandbox's own processes.
func TestCLILogsReusedPID(t *testing.T) {
	c := newSandboxCLI(t)
	id := strings.TrimSpace(c.must("run", "-d", "--name", "job", "--", "sh", "-c", "echo started; sleep 1000"))
	for deadline := time.Now().Add(10 * time.Second); c.must("logs", "job") != "started\n"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the main command printed nothing")
		}
	}
	// Kill the sandbox, then hand its pid to another process, as the
	// kernel may once it is free: the state file runsc wrote names it.
	state := filepath.Join(c.dataDir, "sandboxes", id, "runsc", id+"_sandbox:"+id+".state")
	var st map[string]any
	p, err := os.ReadFile(state)
	if err == nil {
		err = json.Unmarshal(p, &st)
	}
	if err != nil {
		t.Fatal(err)
	}
	sb := st["sandbox"].(map[string]any)
	if err := syscall.Kill(int(sb["pid"].(float64)), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stranger := exec.Command("sleep", "1000")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	sb["pid"] = stranger.Process.Pid
	if p, err = json.Marshal(st); err == nil {
		err = os.WriteFile(state, p, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, _, code := c.run("logs", "-f", "job")
		done <- result{out, code}
	}()
	select {
	case r := <-done:
		if r.out != "started\n" || r.code != 0 {
			t.Fatalf("logs -f: %q, exit %d", r.out, r.code)
		}
	case <-time.After(time.Minute):
		t.Fatal("logs -f still follows a sandbox whose pid another process has")
	}
	if out := c.must("ls"); strings.Contains(out, "running") {
		t.Fatalf("ls shows the dead sandbox running:\n%s", out)
	}
	c.must("rm", "-f", "job")
	// Killed, the stranger would be a zombie until waited for.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stranger.Process.Pid)); err != nil || strings.Contains(string(stat), ") Z") {
		t.Fatalf("rm killed the process that has the sandbox's old pid: %q %v", stat, err)
	}
}

// TestCLIBadInput: each mistake is one line on stderr, exit 125, and
// nothing changes.
func TestCLIBadInput(t *testing.T) {
	c := newSandboxCLI(t)
	c.must("run", "-d", "--name", "taken")
	before := c.must("ls", "-q")
	// "pool fill ../../../x" once made <data>/../x.lock: the directory
	// above the data dir must stay as it is.
	parent, _ := os.ReadDir(filepath.Dir(c.dataDir))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-d", "--image", "nosuch:latest"}, "nosuch"},
		{[]string{"run", "-d", "--image", "Bad::Ref"}, "invalid"},
		{[]string{"run", "-d", "--backend", "nope"}, `backend not available: "nope"`},
		{[]string{"run", "-d", "--name", "taken"}, "already in use"},
		{[]string{"run", "-d", "--memory", "1k"}, "--memory"},
		{[]string{"run", "-d", "--cpus", "0"}, "--cpus"},
		{[]string{"run", "-d", "--pids", "0"}, "--pids"},
		{[]string{"run", "-d", "--memory", "lots"}, "invalid size"},
		{[]string{"run", "-d", "--env", "NOEQUALS"}, "KEY=VALUE"},
		{[]string{"run", "--rm", "-d"}, "cannot be combined"},
		{[]string{"exec", "ghost", "--", "true"}, "no such sandbox"},
		{[]string{"rm", "taken"}, "-f"},
		{[]string{"cp", "a", "b"}, "SANDBOX:PATH"},
		{[]string{"run", "--bogus-flag"}, "unknown flag"},
		// Wrong arguments show the usage line.
		{[]string{"exec"}, "usage: smolvm exec [flags] SANDBOX -- CMD..."},
		{[]string{"exec", "taken"}, "usage: smolvm exec"},
		{[]string{"rm"}, "usage: smolvm rm"},
		{[]string{"fork", "-n", "0", "taken"}, "between 1 and 64"},
		{[]string{"fork", "-n", "-1", "taken"}, "between 1 and 64"},
		{[]string{"fork", "-n", "65", "taken"}, "between 1 and 64"},
		// Names are checked before they reach a path (internal/names).
		{[]string{"pool", "fill", "../../../x"}, "pool name"},
		{[]string{"pool", "rm", "../x"}, "pool name"},
		{[]string{"exec", "../x", "--", "true"}, "sandbox name"},
		{[]string{"rm", strings.Repeat("a", 300)}, "longer than 63 bytes"},
		{[]string{"restore", "../x"}, "snapshot name"},
		{[]string{"snapshot", "rm", "a\x00b"}, "snapshot name"},
		{[]string{"run", "-d", "--name", "../x"}, "sandbox name"},
	} {
		_, errOut, code := c.run(tc.args...)
		if code != 125 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("smolvm %v: exit %d, stderr %q; want 125 and one line mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
	if after := c.must("ls", "-q"); after != before {
		t.Fatalf("bad input changed the sandbox list: %q -> %q", before, after)
	}
	if after, _ := os.ReadDir(filepath.Dir(c.dataDir)); len(after) != len(parent) {
		t.Fatalf("bad input made files beside the data dir: %v -> %v", parent, after)
	}

	// An unwritable data dir and a missing runsc.
	if _, errb, code := newCLI(t, "/proc/version/x").run("ls"); code != 125 || !strings.Contains(errb, "/proc/version/x") {
		t.Errorf("unwritable data dir: %d %q", code, errb)
	}
	missing := &testCLI{t: t, dataDir: c.dataDir, runsc: "/nonexistent/runsc"}
	if _, errb, code := missing.run("ls"); code != 125 || !strings.Contains(errb, "scripts/install.sh") {
		t.Errorf("missing runsc: %d %q", code, errb)
	}
}

func TestCLICheckpointRestoreFork(t *testing.T) {
	c := newSandboxCLI(t)
	c.must("run", "-d", "--name", "src")
	c.must("exec", "src", "--", "sh", "-c", "echo kept > /root/f")
	snapID := strings.TrimSpace(c.must("checkpoint", "--name", "s1", "src"))
	if len(snapID) != 64 {
		t.Fatalf("checkpoint printed %q", snapID)
	}
	// The command returned once its snapshot could be restored; a
	// detached smolvm seals it (sealAside).
	if snap := c.sealed("s1"); snap.Digest == "" {
		t.Fatalf("snapshot inspect after checkpoint: %+v; want a digest", snap)
	}
	c.must("restore", "--name", "r1", "s1")
	if out := c.must("exec", "r1", "--", "cat", "/root/f"); out != "kept\n" {
		t.Fatalf("restored: %q", out)
	}
	ids := strings.Fields(c.must("fork", "-n", "2", "--name-prefix", "f", "src"))
	if len(ids) != 2 {
		t.Fatalf("fork printed %q", ids)
	}
	for _, n := range []string{"f-1", "f-2"} {
		if out := c.must("exec", n, "--", "sh", "-c", "cat /root/f; hostname"); out != "kept\n"+n+"\n" {
			t.Fatalf("%s: %q", n, out)
		}
	}

	c.must("pause", "src")
	if _, errOut, code := c.run("exec", "src", "--", "true"); code != exitFailure || !strings.Contains(errOut, "paused") {
		t.Fatalf("exec in a paused sandbox: exit %d: %q", code, errOut)
	}
	if _, errOut, code := c.run("fork", "src"); code != exitFailure || !strings.Contains(errOut, "resume it first") {
		t.Fatalf("fork of a paused sandbox: exit %d: %q", code, errOut)
	}
	c.must("resume", "src")
	c.must("exec", "src", "--", "true")

	if _, errOut, code := c.run("snapshot", "rm", "s1"); code != exitFailure || !strings.Contains(errOut, "in use") {
		t.Fatalf("snapshot rm of a snapshot r1 came from: exit %d: %q", code, errOut)
	}
	c.must("rm", "-f", "r1")
	c.must("snapshot", "rm", "s1")
	if _, errOut, code := c.run("restore", "s1"); code != exitFailure || !strings.Contains(errOut, "not found") {
		t.Fatalf("restore of a removed snapshot: exit %d: %q", code, errOut)
	}
}

func TestCLIPool(t *testing.T) {
	c := newSandboxCLI(t)
	c.self = testenv.Smolvm(t)
	t.Cleanup(func() { c.run("pool", "rm", "p") })
	c.must("pool", "create", "--size", "1", "--targets", "1", "--name", "p", "--memory", "512m", "--wait")
	pool := func() sandbox.Pool {
		var pools []sandbox.Pool
		if err := json.Unmarshal([]byte(c.must("pool", "ls", "--json")), &pools); err != nil || len(pools) != 1 {
			t.Fatalf("pool ls --json: %v %+v", err, pools)
		}
		return pools[0]
	}
	ready := func() int { return pool().Ready }
	if p := pool(); p.Ready != 1 || p.TargetsReady != 1 {
		t.Fatalf("%d ready and %d targets after --wait, want 1 and 1", p.Ready, p.TargetsReady)
	}
	c.must("run", "-d", "--pool", "p", "--name", "x", "-e", "A=b")
	if out := c.must("exec", "x", "--", "sh", "-c", "echo $SMOLVM_SANDBOX_NAME $A"); out != "x b\n" {
		t.Fatalf("pooled sandbox sees %q", out)
	}
	// The claim started a background refill.
	deadline := time.Now().Add(30 * time.Second)
	for ready() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the pool was not refilled in the background")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A fork of a sandbox with the pool's image and limits goes into its
	// restore target, which is then replaced in the background too.
	c.must("exec", "x", "--", "sh", "-c", "echo forked > /root/f")
	c.must("fork", "x", "--name-prefix", "y")
	if out := c.must("exec", "y-1", "--", "sh", "-c", "cat /root/f; hostname"); out != "forked\ny-1\n" {
		t.Fatalf("fork into a target sees %q", out)
	}
	deadline = time.Now().Add(30 * time.Second)
	for pool().TargetsReady != 1 {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dataDir, "locks", "pool-p.log"))
			t.Fatalf("the pool's target was not replaced in the background: %+v; the fill's log:\n%s", pool(), log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, bad := range [][]string{
		{"run", "-d", "--pool", "nope"},
		{"run", "-d", "--pool", "p", "--memory", "1g"},
		{"pool", "create", "--size", "0"},
		{"pool", "create", "--targets", "65"},
		{"pool", "create", "--size", "1", "--name", "p"},
	} {
		if _, errOut, code := c.run(bad...); code != exitFailure || errOut == "" {
			t.Errorf("smolvm %v: exit %d, %q", bad, code, errOut)
		}
	}
	c.must("pool", "rm", "p")
	if _, errOut, code := c.run("pool", "rm", "p"); code != exitFailure || !strings.Contains(errOut, "no such pool") {
		t.Errorf("pool rm of a removed pool: exit %d, %q", code, errOut)
	}
}
