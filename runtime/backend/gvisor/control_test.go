package gvisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// gvisorDir is the source of the gVisor module smolvm's go.mod pins.
func gvisorDir(t *testing.T) string {
	dir := strings.TrimSpace(testenv.GoList(t, "-m", "-f", "{{.Dir}}", gvisorModule))
	if dir == "" {
		testenv.NeedRoot(t) // another user cannot read root's module cache
		t.Fatalf("go list -m %s: no source directory", gvisorModule)
	}
	return dir
}

// TestControlWirePinned checks that the version smolvm's wire structs
// match, tools/runsc (which builds the runsc smolvm installs) and go.mod
// (whose source TestControlWireMatchesGVisor reads) name one gVisor.
func TestControlWirePinned(t *testing.T) {
	for _, f := range []string{"../../../tools/runsc/go.mod", "../../../go.mod"} {
		p, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`gvisor\.dev/gvisor (v\S+)`).FindSubmatch(p)
		if m == nil {
			t.Fatalf("%s requires no gVisor", f)
		}
		if string(m[1]) != gvisorPin {
			t.Errorf("%s requires gVisor %s, smolvm's wire structs are %s's: bump them together", f, m[1], gvisorPin)
		}
	}
}

// TestControlWireMatchesGVisor holds the local wire structs and method
// names to the pinned gVisor's source: same fields, types and JSON names.
func TestControlWireMatchesGVisor(t *testing.T) {
	dir := gvisorDir(t)
	structs := map[string]*ast.StructType{}
	consts := map[string]string{}
	for _, f := range []string{"pkg/sentry/control/state.go", "runsc/boot/controller.go", "runsc/boot/network.go"} {
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					structs[n.Name.Name] = st
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	for name, want := range map[string]string{
		"ContMgrCheckpoint": methodCheckpoint, "ContMgrRestore": methodRestore,
		"ContMgrPause": methodPause, "ContMgrResume": methodResume, "ContMgrSetNetworkArgs": methodNetworkArgs,
		"ContMgrRootContainerStart": methodStartRoot,
	} {
		if consts[name] != want {
			t.Errorf("boot.%s is %q, smolvm calls %q", name, consts[name], want)
		}
	}
	for _, c := range []struct {
		theirs string
		ours   any
		subset bool // ours sends only some of their fields
	}{
		{"SaveOpts", saveOpts{}, false},
		{"SaveRestoreExecOpts", saveRestoreExecOpts{}, false},
		{"RestoreOpts", restoreOpts{}, false},
		{"CreateLinksAndRoutesArgs", networkArgs{}, true},
		{"LoopbackLink", loopbackLink{}, false},
		{"IPWithPrefix", ipWithPrefix{}, false},
		{"Route", route{}, false},
	} {
		st := structs[c.theirs]
		if st == nil {
			t.Errorf("gVisor has no struct %s", c.theirs)
			continue
		}
		theirs := map[string]string{}
		for _, f := range st.Fields.List {
			typ := types(f.Type)
			tag := ""
			if f.Tag != nil {
				s, _ := strconv.Unquote(f.Tag.Value)
				tag = reflect.StructTag(s).Get("json")
			}
			if len(f.Names) == 0 {
				theirs[typ] = typ + " " + tag // embedded
			}
			for _, n := range f.Names {
				if n.IsExported() {
					theirs[n.Name] = typ + " " + tag
				}
			}
		}
		ours := map[string]string{}
		rt := reflect.TypeOf(c.ours)
		for i := range rt.NumField() {
			f := rt.Field(i)
			name := f.Name
			if f.Anonymous {
				name = ourType(f.Type)
			}
			ours[name] = ourType(f.Type) + " " + f.Tag.Get("json")
		}
		for name, typ := range ours {
			if theirs[name] != typ {
				t.Errorf("%s.%s: smolvm sends %q, gVisor has %q", c.theirs, name, typ, theirs[name])
			}
		}
		if !c.subset {
			for name, typ := range theirs {
				if _, ok := ours[name]; !ok {
					t.Errorf("%s.%s (%s) is missing from smolvm's copy", c.theirs, name, typ)
				}
			}
		}
	}
}

// types renders a field's type as gVisor's source spells it.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	case *ast.ArrayType:
		return "[]" + types(e.Elt)
	case *ast.MapType:
		return "map[" + types(e.Key) + "]" + types(e.Value)
	case *ast.StarExpr:
		return "*" + types(e.X)
	}
	return fmt.Sprintf("%T", e)
}

// ourType renders a local type in gVisor's spelling.
func ourType(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(filePayload{}):
		return "urpc.FilePayload"
	case reflect.TypeOf(saveRestoreExecOpts{}):
		return "SaveRestoreExecOpts"
	case reflect.TypeOf(loopbackLink{}):
		return "LoopbackLink"
	case reflect.TypeOf(ipWithPrefix{}):
		return "IPWithPrefix"
	case reflect.TypeOf(route{}):
		return "Route"
	case reflect.TypeOf(net.IP{}):
		return "net.IP"
	case reflect.TypeOf(net.IPNet{}):
		return "net.IPNet"
	case reflect.TypeOf(time.Duration(0)):
		return "time.Duration"
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "[]byte"
		}
		return "[]" + ourType(t.Elem())
	case reflect.Map:
		return "map[" + ourType(t.Key()) + "]" + ourType(t.Elem())
	}
	return t.String()
}

// urpcSave is what a control server decodes a Checkpoint call into.
type urpcSave struct {
	urpc.FilePayload
	HavePagesFile bool `json:"have_pages_file"`
	Resume        bool
	ExecOpts      struct{ ContainerID string }
}

// containerManager is served by gVisor's own urpc server, so that the
// method names resolve as in a sandbox.
type containerManager struct {
	paused  bool
	started string
}

func (cm *containerManager) Checkpoint(o *urpcSave, _ *struct{}) error {
	defer func() {
		for _, f := range o.Files {
			f.Close()
		}
	}()
	if !o.Resume {
		return errors.New("refusing to stop the sandbox")
	}
	for i, f := range o.Files {
		fmt.Fprintf(f, "file %d of %s, pages %t", i, o.ExecOpts.ContainerID, o.HavePagesFile)
	}
	return nil
}

func (cm *containerManager) Pause(_, _ *struct{}) error {
	cm.paused = true
	return nil
}

// StartRoot takes the container's ID as boot's containerManager does.
func (cm *containerManager) StartRoot(cid *string, _ *struct{}) error {
	cm.started = *cid
	return nil
}

// TestControlSpeaksURPC makes smolvm's calls to gVisor's urpc server:
// the JSON arrives as the method's argument, the files in order, and the
// server's errors come back as errors.
func TestControlSpeaksURPC(t *testing.T) {
	dir, err := os.MkdirTemp("", "urpc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "control.sock")
	ln, err := unet.BindAndListen(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := urpc.NewServer()
	cm := &containerManager{}
	srv.Register(cm)
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			srv.StartHandling(s)
		}
	}()
	ctx := context.Background()
	img := t.TempDir()
	files, err := createSaveFiles(img)
	if err != nil {
		t.Fatal(err)
	}
	opts := &saveOpts{filePayload: filePayload{Files: files}, HavePagesFile: true, Resume: true, ExecOpts: saveRestoreExecOpts{ContainerID: "sb1"}}
	if err := controlCall(ctx, "sb1", path, methodCheckpoint, opts); err != nil {
		t.Fatal(err)
	}
	closeFiles(files)
	for i, name := range []string{"checkpoint.img", "pages_meta.img", "pages.img"} {
		p, _ := os.ReadFile(filepath.Join(img, name))
		if want := fmt.Sprintf("file %d of sb1, pages true", i); string(p) != want {
			t.Errorf("%s: %q, want %q", name, p, want)
		}
	}
	if files, err = createSaveFiles(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer closeFiles(files)
	opts = &saveOpts{filePayload: filePayload{Files: files}}
	if err := controlCall(ctx, "sb1", path, methodCheckpoint, opts); err == nil || !strings.Contains(err.Error(), "refusing to stop the sandbox") {
		t.Errorf("server's error: %v", err)
	}
	if err := controlCall(ctx, "sb1", path, methodPause, nil); err != nil || !cm.paused {
		t.Errorf("pause: %v, paused %t", err, cm.paused)
	}
	id := "sb1"
	if err := controlCall(ctx, "sb1", path, methodStartRoot, &id); err != nil || cm.started != "sb1" {
		t.Errorf("start: %v, started %q", err, cm.started)
	}
	if err := controlCall(ctx, "sb1", path, "containerManager.NoSuch", nil); err == nil {
		t.Error("an unknown method succeeded")
	}
}

// controlHarness is a backend on the installed runsc, which must speak
// the control protocol (scripts/install.sh builds it from the pin).
func controlHarness(t *testing.T) (*Backend, func() *backend.Spec) {
	b, err := New(Config{Runsc: testenv.Runsc(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.proto.check(); err != nil {
		t.Fatalf("the installed runsc does not speak the control protocol: %v", err)
	}
	root, guestBin := hostRoot(t), testenv.Guest(t)
	n := 0
	return b, func() *backend.Spec {
		n++
		id := fmt.Sprintf("ctl%d-%d", os.Getpid(), n)
		s := &backend.Spec{ID: id, Hostname: id, Rootfs: root, GuestBinary: guestBin, Env: []string{"PATH=/usr/bin:/bin"}, MachineID: strings.Repeat("ab", 16)}
		s.Dir = filepath.Join(t.TempDir(), id)
		t.Cleanup(func() { b.Delete(context.Background(), s) })
		return s
	}
}

// runscState asks the runsc CLI, as a user would, for s's status.
func runscStatus(t *testing.T, b *Backend, s *backend.Spec) string {
	t.Helper()
	out, err := exec.Command(b.cfg.Runsc, "--root", layout{s.Dir}.runscRoot(), "state", s.ID).Output()
	if err != nil {
		t.Fatalf("runsc state %s: %v", s.ID, err)
	}
	var st struct{ Status string }
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st.Status
}

// TestControlPath checkpoints, restores into a created sandbox, pauses and
// resumes over the control socket, and checks after each that the runsc
// CLI sees what it would have recorded itself, and still works.
func TestControlPath(t *testing.T) {
	b, spec := controlHarness(t)
	ctx := context.Background()
	src := runKeeping(t, b, spec)
	// Checkpoint, Restore, Pause and Resume take the control path: the
	// harness checked this runsc speaks it (TestControlFallsBack shows the
	// other branch).
	dir := t.TempDir()
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"checkpoint.img", "pages_meta.img", "pages.img"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if st := runscStatus(t, b, src); st != "running" {
		t.Fatalf("runsc state of the source after checkpoint: %s", st)
	}
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(ctx, cp, dir); err != nil {
		t.Fatal(err)
	}
	if st := runscStatus(t, b, cp); st != "running" {
		t.Fatalf("runsc state after restore: %s", st)
	}
	if out, _, _ := shIn(t, b, cp, "cat /root/f; hostname"); out != "kept\n"+cp.ID+"\n" {
		t.Fatalf("copy: %q", out)
	}
	p, _ := os.ReadFile(statePath(layout{cp.Dir}.runscRoot(), cp.ID, "state"))
	if !strings.Contains(string(p), `"restored":true`) {
		t.Error("the state file does not say restored")
	}
	if err := b.Pause(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if st := runscStatus(t, b, cp); st != "paused" {
		t.Fatalf("runsc state after pause: %s", st)
	}
	if err := b.Pause(ctx, cp); err == nil || !strings.Contains(err.Error(), "cannot pause a container in state paused") {
		t.Fatalf("second pause: %v", err)
	}
	// runsc itself resumes what smolvm paused, and the reverse.
	if out, err := exec.Command(b.cfg.Runsc, "--root", layout{cp.Dir}.runscRoot(), "resume", cp.ID).CombinedOutput(); err != nil {
		t.Fatalf("runsc resume: %v: %s", err, out)
	}
	if err := b.Pause(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := shIn(t, b, cp, "cat /root/f"); out != "kept\n" {
		t.Fatalf("copy after resume: %q", out)
	}
	out, err := exec.Command(b.cfg.Runsc, "--root", layout{cp.Dir}.runscRoot(), "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "running") {
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	if err := b.Stop(ctx, cp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestControlStart starts a created sandbox over the control socket, with
// runsc's debug log on: no runsc start ran (it would have left its log),
// the runsc CLI sees the status runsc start records, the agent serves,
// and a second start is refused as runsc refuses it.
func TestControlStart(t *testing.T) {
	b, spec := controlHarness(t)
	b.cfg.Debug = true
	ctx := context.Background()
	s := spec()
	s.Limits.Pids = 64
	if err := b.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(layout{s.Dir}.debugDir(), "*.start.txt")); len(logs) > 0 {
		t.Fatalf("runsc start ran: %v", logs)
	}
	if st := runscStatus(t, b, s); st != "running" {
		t.Fatalf("runsc state after start: %s", st)
	}
	if out, _, exit := shIn(t, b, s, "echo up; cat /etc/machine-id"); exit != 0 || out != "up\n"+s.MachineID+"\n" {
		t.Fatalf("exec after start: %q, exit %d", out, exit)
	}
	if err := b.Start(ctx, s); err == nil || !strings.Contains(err.Error(), "cannot start a container in state running") {
		t.Fatalf("second start: %v", err)
	}
	if err := b.Stop(ctx, s, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestStartControlSpec holds ociSpec to what startControl assumes of the
// sandboxes it starts: runsc start would also run hooks, set
// oom_score_adj and leave IPv6 off the loopback for a spec that asked,
// and startControl does none of that.
func TestStartControlSpec(t *testing.T) {
	s := &backend.Spec{ID: "sb1", Dir: t.TempDir(), GuestBinary: "/bin/true", Limits: sandbox.Limits{Memory: 1 << 30, Pids: 64}}
	spec := ociSpec(s, "/")
	if spec.Hooks != nil {
		t.Errorf("hooks: %+v", spec.Hooks)
	}
	if spec.Process.OOMScoreAdj != nil {
		t.Errorf("oom_score_adj: %d", *spec.Process.OOMScoreAdj)
	}
	if _, ok := spec.Linux.Sysctl["net.ipv6.conf.all.disable_ipv6"]; ok {
		t.Errorf("sysctl: %v", spec.Linux.Sysctl)
	}
}

// runKeeping runs a sandbox that holds /root/f ("kept"), which its copies
// must hold too.
func runKeeping(t *testing.T, b *Backend, spec func() *backend.Spec) *backend.Spec {
	t.Helper()
	src := spec()
	if err := b.Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if _, _, exit := shIn(t, b, src, "echo kept > /root/f"); exit != 0 {
		t.Fatal(exit)
	}
	return src
}

func shIn(t *testing.T, b *Backend, s *backend.Spec, script string) (string, string, int) {
	t.Helper()
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := b.Exec(ctx, s, sandbox.Process{Args: []string{"sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), exit.Code
}

// checkpointed runs a sandbox and checkpoints it, leaving it running.
func checkpointed(t *testing.T, b *Backend, spec func() *backend.Spec) string {
	t.Helper()
	src := spec()
	ctx := context.Background()
	if err := b.Run(ctx, src); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nothingLeft checks that Delete left no process and no directory.
func nothingLeft(t *testing.T, b *Backend, s *backend.Spec) {
	t.Helper()
	root := layout{s.Dir}.runscRoot()
	if err := b.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && processAlive(pid) && worksOn(pid, root) {
			t.Errorf("process %d still works on %s", pid, root)
		}
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there: %v", s.Dir, err)
	}
}

// TestControlSocketVanishes puts a listener in place of a created
// sandbox's control socket that answers the network call, then, at the
// Restore call, kills the sandbox and hangs up: the restore fails with
// the reason, and Delete leaves nothing.
func TestControlSocketVanishes(t *testing.T) {
	b, spec := controlHarness(t)
	ctx := context.Background()
	dir := checkpointed(t, b, spec)
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	st, err := b.state(cp)
	if err != nil {
		t.Fatal(err)
	}
	sock := st.Sandbox.ControlSocketPath
	if err := os.Rename(sock, sock+".real"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		dec := json.NewDecoder(bufio.NewReader(c))
		for {
			var call struct{ Method string }
			if dec.Decode(&call) != nil {
				return
			}
			if call.Method == methodRestore {
				unix.Kill(st.Sandbox.Pid, unix.SIGKILL)
				return
			}
			c.Write([]byte(`{"success":true,"err":"","result":null}`))
		}
	}()
	err = b.Restore(ctx, cp, dir)
	if err == nil || !strings.Contains(err.Error(), "control socket closed without an answer") {
		t.Fatalf("restore over a vanishing socket: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s, _ := b.State(ctx, cp); s != backend.StatusStopped; s, _ = b.State(ctx, cp) {
		if time.Now().After(deadline) {
			t.Fatalf("after the failed restore: %s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	nothingLeft(t, b, cp)
}

// TestControlTargetDied restores into a created sandbox that was killed
// while it waited: a clear error, and Delete leaves nothing.
func TestControlTargetDied(t *testing.T) {
	b, spec := controlHarness(t)
	ctx := context.Background()
	dir := checkpointed(t, b, spec)
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	pid, err := b.sandboxPid(cp)
	if err != nil {
		t.Fatal(err)
	}
	unix.Kill(pid, unix.SIGKILL)
	for i := 0; processAlive(pid) && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	err = b.Restore(ctx, cp, dir)
	if !errors.Is(err, backend.ErrNotRunning) || !strings.Contains(err.Error(), "died") {
		t.Fatalf("restore into a dead sandbox: %v", err)
	}
	nothingLeft(t, b, cp)
}

// TestControlFallsBack drives a runsc whose version smolvm cannot tell (a
// wrapper script): the check says why, and checkpoint and restore into a
// created sandbox, pause and start go through the CLI, which the wrapper
// logs.
func TestControlFallsBack(t *testing.T) {
	real := testenv.Runsc(t)
	dir := t.TempDir()
	wrapper, log := filepath.Join(dir, "runsc"), filepath.Join(dir, "calls")
	script := fmt.Sprintf("#!/bin/sh\nfor a; do case $a in checkpoint|restore|pause|resume|start) echo $a >> %s;; esac; done\nexec %s \"$@\"\n", log, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckControl(wrapper)
	if !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "using the runsc CLI") {
		t.Fatalf("check of a wrapper: %v", err)
	}
	goTool, _ := exec.LookPath("go")
	if err := CheckControl(goTool); !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "an unknown version") {
		t.Fatalf("check of a Go binary without gVisor: %v", err)
	}
	b, spec := controlHarness(t)
	b.cfg.Runsc, b.proto = wrapper, &protocol{runsc: wrapper}
	ctx := context.Background()
	img := checkpointed(t, b, spec)
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(ctx, cp, img); err != nil {
		t.Fatal(err)
	}
	if err := b.Pause(ctx, cp); err != nil {
		t.Fatal(err)
	}
	started := spec()
	if err := b.Create(ctx, started); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, started); err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(log)
	if got := strings.Fields(string(calls)); strings.Join(got, " ") != "checkpoint restore pause start" {
		t.Fatalf("runsc CLI calls: %q", got)
	}
}

// TestSeccompPrecompiled boots a sandbox with runsc's debug log and reads
// there that the Sentry and the gofer each found a precompiled seccomp
// program for smolvm's configuration (tools/runsc/cmd/seccompgen keeps
// only those): without one, each compiles its filter at every start.
func TestSeccompPrecompiled(t *testing.T) {
	b, spec := controlHarness(t)
	b.cfg.Debug = true
	s := spec()
	if err := b.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	logs, err := filepath.Glob(filepath.Join(layout{s.Dir}.debugDir(), "*"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no runsc debug logs: %v", err)
	}
	loaded := 0
	for _, f := range logs {
		p, _ := os.ReadFile(f)
		if strings.Contains(string(p), "No precompiled program found") {
			t.Errorf("%s: %s", filepath.Base(f), lastLine(string(p[:strings.Index(string(p), "No precompiled program found")+80])))
		}
		loaded += strings.Count(string(p), "Loaded precompiled seccomp instructions")
	}
	if loaded < 2 {
		t.Errorf("%d precompiled programs loaded, want the Sentry's and the gofer's", loaded)
	}
}

// TestCheckpointSkipsHoles checks runsc's pgalloc patch
// (tools/runsc/patches/pgalloc-skip-holes.patch): the Sentry's save passes
// over memory it allocated but never touched without reading it, and what
// it saves around those holes comes back intact in a restored copy.
func TestCheckpointSkipsHoles(t *testing.T) {
	b, spec := controlHarness(t)
	b.cfg.Debug = true
	ctx := context.Background()
	src := runKeeping(t, b, spec)
	// Random pages, then a sparse file with data only near its end: the
	// Sentry's tmpfs keeps both in its memory file.
	const sums = "md5sum /dev/shm/r /dev/shm/s"
	want, errOut, exit := shIn(t, b, src, "head -c 3000000 /dev/urandom > /dev/shm/r && truncate -s 6M /dev/shm/s && "+
		"echo tail | dd of=/dev/shm/s bs=1 seek=5000000 conv=notrunc 2>/dev/null && "+sums)
	if exit != 0 {
		t.Fatalf("fill: exit %d: %s", exit, errOut)
	}
	dir := t.TempDir()
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(ctx, cp, dir); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := shIn(t, b, cp, sums); got != want {
		t.Errorf("restored copy: %q, want %q", got, want)
	}
	logs, _ := filepath.Glob(filepath.Join(layout{src.Dir}.debugDir(), "*"))
	skipped := regexp.MustCompile(`save skipped (\d+) bytes of holes unread`)
	most := -1 // the Sentry saves more than one memory file; the main one has holes
	for _, f := range logs {
		p, _ := os.ReadFile(f)
		for _, m := range skipped.FindAllSubmatch(p, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			most = max(most, n)
		}
	}
	switch {
	case most < 0:
		t.Fatal("no save in the source's runsc debug logs says what it skipped: is the installed runsc built with tools/runsc/patches?")
	case most == 0:
		t.Error("the save read every page: it skipped no holes")
	}
}

// TestControlRestoreFrom begins a restore into a created sandbox before
// its image exists, as a fork's copy does: runsc's lock is held and the
// network arguments are sent while it waits, the restore follows once
// the image is given, and a checkpoint that fails releases the lock and
// leaves the sandbox to Delete.
func TestControlRestoreFrom(t *testing.T) {
	b, spec := controlHarness(t)
	ctx := context.Background()
	src := runKeeping(t, b, spec)
	cp := spec()
	if err := b.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	asked, give := make(chan struct{}), make(chan string)
	done := make(chan error, 1)
	go func() {
		done <- b.RestoreFrom(ctx, cp, func(context.Context) (string, error) {
			close(asked)
			return <-give, nil
		})
	}()
	<-asked
	// Waiting for the image, the copy holds runsc's lock on its state.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := lockState(short, layout{cp.Dir}.runscRoot(), cp.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("runsc's lock while the restore waits for its image: %v", err)
	}
	dir := t.TempDir()
	if err := b.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	give <- dir
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out, _, _ := shIn(t, b, cp, "cat /root/f; hostname"); out != "kept\n"+cp.ID+"\n" {
		t.Fatalf("copy: %q", out)
	}
	if st := runscStatus(t, b, cp); st != "running" {
		t.Fatalf("runsc state after restore: %s", st)
	}

	failed := spec()
	if err := b.Create(ctx, failed); err != nil {
		t.Fatal(err)
	}
	saveErr := errors.New("the checkpoint failed")
	err = b.RestoreFrom(ctx, failed, func(context.Context) (string, error) { return "", saveErr })
	if !errors.Is(err, saveErr) {
		t.Fatalf("restore whose checkpoint failed: %v", err)
	}
	sf, err := lockState(ctx, layout{failed.Dir}.runscRoot(), failed.ID)
	if err != nil {
		t.Fatalf("runsc's lock after the failed restore: %v", err)
	}
	sf.unlock()
	if err := b.Delete(ctx, failed); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, b, failed)
}
