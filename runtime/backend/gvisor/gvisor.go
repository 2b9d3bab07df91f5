// Package gvisor runs sandboxes under gVisor's application kernel by
// driving the runsc OCI runtime with the systrap platform.
package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// Config configures the backend.
type Config struct {
	// Runsc is the path of a static runsc binary.
	Runsc string
	// Platform is runsc's platform; systrap works without /dev/kvm.
	Platform string
	// Debug keeps runsc's debug logs under each sandbox's Dir/debug.
	Debug bool
}

// Backend drives runsc. Each sandbox gets its own runsc --root, so one
// wedged sandbox's state lock cannot block any other.
type Backend struct {
	cfg Config
	// proto decides whether operations go to the sandbox's control
	// socket or through the runsc CLI.
	proto *protocol
}

// New returns a gVisor backend.
func New(cfg Config) (*Backend, error) {
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if _, err := os.Stat(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("runsc %q: %w", cfg.Runsc, err)
	}
	return &Backend{cfg: cfg, proto: &protocol{runsc: cfg.Runsc}}, nil
}

var _ backend.Backend = (*Backend)(nil)

// Name implements backend.Backend.
func (b *Backend) Name() string { return "gvisor" }

// runscArgs are the global flags for one sandbox. They must be identical on
// every call for that sandbox: runsc reads some of them at each command.
func (b *Backend) runscArgs(s *backend.Spec) []string {
	l := layout{s.Dir}
	// With a namespace, gVisor's netstack drives its veth; the host
	// polices what crosses it. Without one, not even that exists.
	network := "none"
	if s.NetNS != "" {
		network = "sandbox"
	}
	args := []string{
		"--root", l.runscRoot(),
		"--platform", b.cfg.Platform,
		"--network", network,
		// The agent listens on a host Unix socket: one connect per exec
		// instead of a runsc process per exec.
		"--host-uds", "create",
		"--overlay2", overlayFlag(s),
		"--in-sandbox-cgroup", "v2",
	}
	if b.cfg.Debug {
		args = append(args, "--debug", "--debug-log", l.debugDir()+"/")
	}
	return args
}

// overlayFlag puts the sandbox's writable layer over the read-only rootfs,
// in a file under the sandbox's dir capped at the disk limit, so writes
// never reach the image and a full "disk" is ENOSPC inside, not on the host.
// A sandbox with an Upper writes through gVisor to the host overlay
// (mountRootfs) instead.
func overlayFlag(s *backend.Spec) string {
	if s.Rootfs.Upper != "" {
		return "none"
	}
	f := "root:dir=" + layout{s.Dir}.upper()
	if s.Rootfs.WritableSize > 0 {
		f += ",size=" + strconv.FormatInt(s.Rootfs.WritableSize, 10)
	}
	return f
}

func (b *Backend) runsc(ctx context.Context, s *backend.Spec, args ...string) error {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.runscArgs(s), args...)...)
	// The sandbox and gofer that runsc starts inherit its stdio, so stderr
	// must be a file: a pipe would stay open for the sandbox's lifetime and
	// Run would never return. Stdin and stdout are /dev/null.
	errf, err := os.CreateTemp(s.Dir, "runsc-stderr-")
	if err != nil {
		return fmt.Errorf("runsc %s: %w", args[0], err)
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	cmd.Stderr = errf
	// If smolvm dies, runsc must not finish a create nobody records.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errf.Name())
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(string(msg)))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, s *backend.Spec) error {
	if err := b.prepare(s); err != nil {
		return fmt.Errorf("create %s: %w", s.ID, err)
	}
	if err := b.runsc(ctx, s, "create", "--bundle", layout{s.Dir}.bundle(), s.ID); err != nil {
		return fmt.Errorf("create %s: %w", s.ID, err)
	}
	return nil
}

// prepare lays out the sandbox's directory: bundle, rootfs, agent config.
func (b *Backend) prepare(s *backend.Spec) error {
	l := layout{s.Dir}
	for _, d := range []string{l.bundle(), l.run(), l.runscRoot(), l.upper()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := inertMount(l.run()); err != nil {
		return err
	}
	root, err := b.mountRootfs(s)
	if err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(l.bundle(), "config.json"), ociSpec(s, root)); err != nil {
		return err
	}
	return writeJSON(filepath.Join(l.run(), "agent.json"), agentConfig(s))
}

// mountRootfs stacks the image's layers with overlayfs and returns the
// mount. The overlay's host-side upper layer takes only the mount points
// runsc's gofer creates before boot, so the shared layers are never
// modified; the sandbox itself sees the root read-only under gVisor's own
// writable overlay. With Rootfs.Upper, that directory is the upper layer
// and takes the sandbox's writes; redirect_dir and metacopy stay off so
// that it holds every changed file whole, as an image layer must.
func (b *Backend) mountRootfs(s *backend.Spec) (string, error) {
	lowers := s.Rootfs.Layers
	if len(lowers) == 0 {
		return "", errors.New("image has no layers")
	}
	l := layout{s.Dir}
	target, upper, work := l.rootfs(), l.rootfs()+".upper", l.rootfs()+".work"
	extra := ""
	if s.Rootfs.Upper != "" {
		// The work dir must be on the upper's filesystem.
		upper, work, extra = s.Rootfs.Upper, s.Rootfs.Upper+".work", ",redirect_dir=off,metacopy=off"
	}
	for _, d := range []string{target, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if mounted(target) {
		return target, nil
	}
	// overlayfs lists the top layer first.
	dirs := make([]string, len(lowers))
	for i, layer := range lowers {
		dirs[len(lowers)-1-i] = layer.Dir
	}
	opts := "lowerdir=" + strings.Join(dirs, ":") + ",upperdir=" + upper + ",workdir=" + work + extra
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount rootfs overlay: %w", err)
	}
	return target, nil
}

// inertMount makes dir a nosuid, nodev, noexec mount of itself. The run dir
// is the one host directory a sandbox can write; whatever root inside puts
// there (a setuid binary, a device node) must carry no power on the host.
func inertMount(dir string) error {
	if mounted(dir) {
		return nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("remount %s inert: %w", dir, err)
	}
	return nil
}

func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Run implements backend.Backend with one `runsc run --detach`, which saves
// a whole runsc process start over create + start.
func (b *Backend) Run(ctx context.Context, s *backend.Spec) error {
	l := layout{s.Dir}
	if err := b.prepare(s); err != nil {
		return fmt.Errorf("run %s: %w", s.ID, err)
	}
	if err := b.runsc(ctx, s, "run", "--detach", "--bundle", l.bundle(), s.ID); err != nil {
		return fmt.Errorf("run %s: %w", s.ID, err)
	}
	return b.booted(ctx, s)
}

// booted waits for the agent, then applies the limits that would slow the
// boot itself.
func (b *Backend) booted(ctx context.Context, s *backend.Spec) error {
	if err := b.waitAgent(ctx, s); err != nil {
		return err
	}
	if err := limitCPU(s); err != nil {
		return fmt.Errorf("%s: %w", s.ID, err)
	}
	return nil
}

// Restart implements backend.Backend. runsc cannot start a stopped
// container again, so the sandbox is deleted (its run dir and writable
// layer with it) and run anew from the same spec.
func (b *Backend) Restart(ctx context.Context, s *backend.Spec) error {
	if err := b.Delete(ctx, s); err != nil {
		return fmt.Errorf("restart %s: %w", s.ID, err)
	}
	return b.Run(ctx, s)
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, s *backend.Spec) error {
	l := layout{s.Dir}
	os.Remove(l.ExitFile())
	var err error
	if s.NetNS == "" && b.proto.check() == nil {
		// A sandbox with a network needs runsc to read its namespace's
		// links and pass their sockets: that stays with the CLI.
		err = b.startControl(ctx, s)
	} else {
		err = b.runsc(ctx, s, "start", s.ID)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", s.ID, err)
	}
	return b.booted(ctx, s)
}

// waitAgent returns once the agent answers, or early with the main
// process's exit if it ended first (a run of a short command).
func (b *Backend) waitAgent(ctx context.Context, s *backend.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := b.Guest(s)
	delay, start := 500*time.Microsecond, time.Now()
	var looked time.Time
	for {
		if c.Ping(ctx) == nil {
			return nil
		}
		if _, err := os.Stat(layout{s.Dir}.ExitFile()); err == nil {
			return nil
		}
		// Whether the sandbox died is worth a look every few milliseconds,
		// not at every poll: the state file holds the whole spec, and ten
		// copies restoring at once would spend their host's CPU parsing it.
		if time.Since(looked) >= 5*time.Millisecond {
			looked = time.Now()
			if st, _ := b.State(ctx, s); st == backend.StatusStopped || st == backend.StatusMissing {
				return fmt.Errorf("%s: sandbox exited before its agent answered%s", s.ID, b.bootError(s))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: agent did not answer: %w", s.ID, ctx.Err())
		case <-time.After(delay):
		}
		// Boot takes tens of milliseconds: poll finely at first, since a
		// failed connect costs microseconds and every millisecond of
		// overshoot is start-up latency.
		if time.Since(start) > 200*time.Millisecond {
			delay = 10 * time.Millisecond
		}
	}
}

func (b *Backend) bootError(s *backend.Spec) string {
	p, err := os.ReadFile(filepath.Join(layout{s.Dir}.run(), "agent.err"))
	if err != nil || len(p) == 0 {
		return ""
	}
	return ": " + lastLine(string(p))
}

// Guest implements backend.Backend.
func (b *Backend) Guest(s *backend.Spec) *guest.Client {
	return guest.NewClient(guest.UnixDialer(layout{s.Dir}.socket()))
}

// Exec implements backend.Backend.
func (b *Backend) Exec(ctx context.Context, s *backend.Spec, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	return b.Guest(s).Exec(ctx, p, stdio)
}

// Signal implements backend.Backend.
func (b *Backend) Signal(ctx context.Context, s *backend.Spec, sig syscall.Signal, all bool) error {
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	return b.runsc(ctx, s, append(args, s.ID, strconv.Itoa(int(sig)))...)
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, s *backend.Spec, timeout time.Duration) error {
	st, err := b.State(ctx, s)
	if err != nil {
		return err
	}
	if st != backend.StatusRunning && st != backend.StatusPaused {
		return nil
	}
	if st == backend.StatusRunning {
		b.Signal(ctx, s, unix.SIGTERM, false)
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if st, _ := b.State(ctx, s); st != backend.StatusRunning {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if pid, err := b.sandboxPid(s); err == nil {
		unix.Kill(pid, unix.SIGKILL)
	}
	for i := 0; i < 100; i++ {
		if st, _ := b.State(ctx, s); st != backend.StatusRunning && st != backend.StatusPaused {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("stop %s: sandbox still running after SIGKILL", s.ID)
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, s *backend.Spec) error {
	root := layout{s.Dir}.runscRoot()
	// runsc delete kills the pids its state file names, which may belong
	// to other processes by now: it runs only if each is still this
	// sandbox's (or not started yet).
	stale := false
	if st, err := b.state(s); err == nil {
		for _, pid := range []int{st.Sandbox.Pid, st.GoferPid} {
			if liveOn(pid, root) {
				unix.Kill(pid, unix.SIGKILL)
			} else if pid > 0 {
				stale = true
			}
		}
	}
	// runsc delete removes its cgroups and state; it may fail on a
	// half-created sandbox. The removals below cover both.
	if !stale {
		b.runsc(ctx, s, "delete", "--force", s.ID)
	}
	killStragglers(root)
	// A cgroup that outlives its wait is reported, but the rest goes:
	// the next delete, or gc's Sweep, removes the cgroup alone.
	cgErr := removeCgroups(ctx, s.ID)
	if err := unmountUnder(s.Dir); err != nil {
		return fmt.Errorf("delete %s: %w", s.ID, err)
	}
	if err := os.RemoveAll(s.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", s.ID, err)
	}
	if cgErr != nil {
		return fmt.Errorf("delete %s: cgroups: %w", s.ID, cgErr)
	}
	return nil
}

// runscState is the part of runsc's state file smolvm reads. Reading the
// file avoids starting the runsc binary just to ask.
type runscState struct {
	Status   string `json:"status"`
	GoferPid int    `json:"goferPid"`
	Sandbox  struct {
		Pid               int    `json:"pid"`
		StartTime         string `json:"startTime"`
		ControlSocketPath string `json:"controlSocketPath"`
	} `json:"sandbox"`
}

func (b *Backend) state(s *backend.Spec) (*runscState, error) {
	root := layout{s.Dir}.runscRoot()
	p, err := os.ReadFile(statePath(root, s.ID, "state"))
	if err != nil {
		return nil, err
	}
	var st runscState
	if err := json.Unmarshal(p, &st); err != nil {
		return nil, fmt.Errorf("runsc state of %s: %w", s.ID, err)
	}
	return &st, nil
}

func (b *Backend) sandboxPid(s *backend.Spec) (int, error) {
	st, err := b.state(s)
	if err != nil {
		return 0, err
	}
	if !liveOn(st.Sandbox.Pid, layout{s.Dir}.runscRoot()) {
		return 0, backend.ErrNotRunning
	}
	return st.Sandbox.Pid, nil
}

// State implements backend.Backend. The state file records what runsc last
// did; whether the sandbox process still lives is checked directly, so a
// sandbox killed behind smolvm's back shows as stopped.
func (b *Backend) State(ctx context.Context, s *backend.Spec) (backend.Status, error) {
	st, err := b.state(s)
	if errors.Is(err, fs.ErrNotExist) {
		return backend.StatusMissing, nil
	}
	if err != nil {
		return "", err
	}
	switch {
	case !liveOn(st.Sandbox.Pid, layout{s.Dir}.runscRoot()):
		return backend.StatusStopped, nil
	case st.Status == "paused":
		return backend.StatusPaused, nil
	case st.Status == "created":
		return backend.StatusCreated, nil
	case st.Status == "running":
		return backend.StatusRunning, nil
	}
	return backend.StatusStopped, nil
}
