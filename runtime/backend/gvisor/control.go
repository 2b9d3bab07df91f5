package gvisor

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/sentry/state/checkpointfiles"

	"smolvm.dev/smolvm/runtime/backend"
)

// The sandbox's control server (runsc/boot's containerManager) answers
// these urpc methods on its control socket. Calling them directly saves a
// runsc process start (~12 ms quiet, far more loaded) per operation; the
// wire structs below mirror runsc/boot and pkg/sentry/control at the
// pinned gVisor version (TestControlWireMatchesGVisor holds them to its
// source), because importing runsc/boot would pull ~260 packages into
// every smolvm command.
const (
	methodCheckpoint  = "containerManager.Checkpoint"
	methodRestore     = "containerManager.Restore"
	methodPause       = "containerManager.Pause"
	methodResume      = "containerManager.Resume"
	methodNetworkArgs = "containerManager.SetNetworkArgs"
	methodStartRoot   = "containerManager.StartRoot"
)

// filePayload is urpc.FilePayload: files passed beside the JSON.
type filePayload struct {
	Files []*os.File `json:"-"`
}

// saveOpts is control.SaveOpts.
type saveOpts struct {
	Key                            []byte            `json:"key"`
	Metadata                       map[string]string `json:"metadata"`
	AppMFExcludeCommittedZeroPages bool              `json:"app_mf_exclude_committed_zero_pages"`
	HavePagesFile                  bool              `json:"have_pages_file"`
	filePayload
	Resume                   bool
	ExecOpts                 saveRestoreExecOpts
	UseCheckpointGofer       bool   `json:"use_checkpoint_gofer"`
	CudaCheckpointPath       string `json:"cuda_checkpoint_path"`
	CudaCheckpointSequential bool   `json:"cuda_checkpoint_sequential"`
}

// saveRestoreExecOpts is control.SaveRestoreExecOpts.
type saveRestoreExecOpts struct {
	Argv        string
	Timeout     time.Duration
	ContainerID string
}

// restoreOpts is boot.RestoreOpts.
type restoreOpts struct {
	filePayload
	HavePagesFile      bool
	HaveDeviceFile     bool
	Background         bool
	UseCheckpointGofer bool `json:"use_checkpoint_gofer"`
}

// networkArgs is the part of boot.CreateLinksAndRoutesArgs a sandbox
// without a network (runsc --network=none) sends: its loopback.
type networkArgs struct {
	filePayload
	LoopbackLinks []loopbackLink
	IsRestore     bool
}

// loopbackLink is boot.LoopbackLink.
type loopbackLink struct {
	Name      string
	Addresses []ipWithPrefix
	Routes    []route
	GVisorGRO bool
}

// ipWithPrefix is boot.IPWithPrefix.
type ipWithPrefix struct {
	Address   net.IP
	PrefixLen int
}

// route is boot.Route.
type route struct {
	Destination net.IPNet
	Gateway     net.IP
	MTU         uint32
}

// loopback is boot.DefaultLoopbackLink: what runsc configures in a
// sandbox with --network=none before a restore.
func loopback() loopbackLink {
	return loopbackLink{
		Name: "lo",
		Addresses: []ipWithPrefix{
			{Address: net.IP("\x7f\x00\x00\x01"), PrefixLen: 8},
			{Address: net.IPv6loopback, PrefixLen: 128},
		},
		Routes: []route{
			{Destination: net.IPNet{IP: net.IPv4(0x7f, 0, 0, 0), Mask: net.IPv4Mask(0xff, 0, 0, 0)}},
			{Destination: net.IPNet{IP: net.IPv6loopback, Mask: net.IPMask(strings.Repeat("\xff", net.IPv6len))}},
		},
	}
}

// saveExecTimeout is control.DefaultSaveRestoreExecTimeout, which runsc
// checkpoint sends though no exec is asked for.
const saveExecTimeout = 10 * time.Minute

// protocol decides, once per runsc binary, whether smolvm may speak to its
// sandboxes' control sockets: only a runsc built from the gVisor version
// whose wire structs smolvm carries. Any other falls back to the runsc CLI.
type protocol struct {
	runsc string

	mu  sync.Mutex
	key string // the binary's identity when err was decided
	err error
}

// errProtocol marks a runsc whose control protocol smolvm does not speak.
var errProtocol = errors.New("runsc control protocol differs")

// check returns nil if the control socket may be used; otherwise why not.
func (p *protocol) check() error {
	if p == nil {
		return fmt.Errorf("%w: no runsc", errProtocol)
	}
	fi, err := os.Stat(p.runsc)
	if err != nil {
		return fmt.Errorf("%w: %v", errProtocol, err)
	}
	st, _ := fi.Sys().(*unix.Stat_t)
	key := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	if st != nil {
		key += fmt.Sprint(" ", st.Dev, st.Ino)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// runsc may be replaced under a long-lived smolvm (install.sh).
	if key != p.key {
		p.key, p.err = key, checkRunsc(p.runsc)
	}
	return p.err
}

// CheckControl reports whether smolvm drives the sandboxes of the runsc
// at path through their control sockets, and if not, why it falls back to
// the runsc CLI.
func CheckControl(path string) error {
	return checkRunsc(path)
}

// checkRunsc compares the gVisor module version runsc was built from with
// the one smolvm's wire structs match; they must be equal.
func checkRunsc(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s has no Go build info (%v); using the runsc CLI", errProtocol, path, err)
	}
	got := ""
	if bi.Main.Path == gvisorModule {
		got = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == gvisorModule {
			got = d.Version
			if d.Replace != nil {
				got = d.Replace.Version
			}
		}
	}
	if got != gvisorPin {
		if got == "" {
			got = "an unknown version"
		}
		return fmt.Errorf("%w: %s is built from gVisor %s, smolvm speaks the control protocol of %s (scripts/install.sh builds the matching runsc); using the runsc CLI", errProtocol, path, got, gvisorPin)
	}
	return nil
}

const gvisorModule = "gvisor.dev/gvisor"

// gvisorPin is the gVisor version whose wire structs smolvm carries: the
// one tools/runsc/go.mod pins and go.mod requires (TestControlWirePinned).
// checkRunsc compares runsc's build info with this constant, not with
// smolvm's own build info, which a test binary lacks. The wire structs
// change with the pin (both go.mod files; TestControlWireMatchesGVisor).
const gvisorPin = "v0.0.0-20260905035102-160fafc42237"

// controlConn is one connection to a sandbox's control server, speaking
// gVisor's urpc: a call is one JSON object {"method", "arg"}, its files
// passed with SCM_RIGHTS on the first write; the answer is one JSON object
// {"success", "err", "result"}. It is written here rather than imported
// because gVisor's pkg/urpc brings pkg/unet, whose pkg/safecopy replaces
// the process's SIGSEGV and SIGBUS handlers at init: 30 packages and a
// signal handler in every smolvm command for 60 lines of protocol.
// TestControlSpeaksURPC runs these calls against gVisor's own urpc server.
type controlConn struct {
	id   string
	conn *net.UnixConn
	dec  *json.Decoder
}

// dialControl connects to the control socket at path, which runsc's state
// file names. A path too long for sockaddr_un is reached through
// /proc/self/fd, as runsc does.
func dialControl(id, path string) (*controlConn, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: runsc's state file names no control socket", id)
	}
	addr := path
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: control socket: %w", id, err)
		}
		defer unix.Close(fd)
		addr = filepath.Join("/proc/self/fd", strconv.Itoa(fd))
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%s: connect to the control socket: %w", id, err)
	}
	return &controlConn{id: id, conn: conn, dec: json.NewDecoder(conn)}, nil
}

// fileArg is an argument that passes files (urpc.FilePayload's Files).
type fileArg interface{ files() []*os.File }

func (p *filePayload) files() []*os.File { return p.Files }

// call makes one call; ctx ending closes the connection, which ends a call
// blocked on the sandbox's answer.
func (c *controlConn) call(ctx context.Context, method string, arg any) error {
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err := c.roundTrip(method, arg)
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", c.id, method, ctx.Err())
	}
	return err
}

func (c *controlConn) roundTrip(method string, arg any) error {
	p, err := json.Marshal(struct {
		Method string `json:"method"`
		Arg    any    `json:"arg"`
	}{method, arg})
	if err != nil {
		return fmt.Errorf("%s: %s: %w", c.id, method, err)
	}
	var oob []byte
	if fa, ok := arg.(fileArg); ok && len(fa.files()) > 0 {
		fds := make([]int, len(fa.files()))
		for i, f := range fa.files() {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	// The files go with the first bytes; the rest follows without them.
	n, _, err := c.conn.WriteMsgUnix(p, oob, nil)
	if err == nil && n < len(p) {
		_, err = c.conn.Write(p[n:])
	}
	if fa, ok := arg.(fileArg); ok {
		runtime.KeepAlive(fa.files())
	}
	if err != nil {
		return fmt.Errorf("%s: %s: control socket: %w", c.id, method, err)
	}
	var res struct {
		Success bool   `json:"success"`
		Err     string `json:"err"`
	}
	if err := c.dec.Decode(&res); err != nil {
		// No answer: the sandbox died or its socket went away mid-call.
		return fmt.Errorf("%s: %s: control socket closed without an answer: %w", c.id, method, err)
	}
	if !res.Success {
		return fmt.Errorf("%s: %s: %s", c.id, method, res.Err)
	}
	return nil
}

func (c *controlConn) close() { c.conn.Close() }

// controlCall connects, makes one call and closes.
func controlCall(ctx context.Context, id, path, method string, arg any) error {
	c, err := dialControl(id, path)
	if err != nil {
		return err
	}
	defer c.close()
	return c.call(ctx, method, arg)
}

// checkpointControl is `runsc checkpoint` over the control socket. runsc
// checkpoint writes nothing to its state file (the Checkpointed flag it
// sets stays in memory), so neither does this; it only checks, under
// runsc's lock, that the sandbox is in a state runsc would checkpoint.
func (b *Backend) checkpointControl(ctx context.Context, s *backend.Spec, dir string, leaveRunning bool) error {
	sf, err := lockState(ctx, layout{s.Dir}.runscRoot(), s.ID)
	if err != nil {
		return err
	}
	st := sf.st
	sf.unlock()
	if err := b.requireState(s, st, "checkpoint", "created", "running", "paused"); err != nil {
		return err
	}
	files, err := createSaveFiles(dir)
	if err != nil {
		return err
	}
	defer closeFiles(files)
	opts := &saveOpts{
		Metadata:      map[string]string{"compression": "none"},
		HavePagesFile: true,
		filePayload:   filePayload{Files: files},
		Resume:        leaveRunning,
		ExecOpts:      saveRestoreExecOpts{Timeout: saveExecTimeout, ContainerID: s.ID},
	}
	if err := controlCall(ctx, s.ID, st.Sandbox.ControlSocketPath, methodCheckpoint, opts); err != nil {
		for _, f := range files {
			os.Remove(f.Name())
		}
		return err
	}
	return nil
}

// createSaveFiles creates the image files runsc's checkpoint writes, in
// the order the Checkpoint call takes them: state, pages metadata, pages.
// The image is uncompressed, which restore --background needs.
func createSaveFiles(dir string) ([]*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []*os.File
	for _, name := range []string{checkpointfiles.StateFileName, checkpointfiles.PagesMetadataFileName, checkpointfiles.PagesFileName} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// openImage opens a checkpoint's files for the Restore call.
func openImage(dir string) ([]*os.File, bool, error) {
	st, err := os.Open(filepath.Join(dir, checkpointfiles.StateFileName))
	if err != nil {
		return nil, false, err
	}
	files := []*os.File{st}
	meta, err := os.Open(filepath.Join(dir, checkpointfiles.PagesMetadataFileName))
	if errors.Is(err, os.ErrNotExist) {
		return files, false, nil // one file holds it all
	}
	if err != nil {
		closeFiles(files)
		return nil, false, err
	}
	files = append(files, meta)
	// Not O_DIRECT: it serialises parallel restores.
	pages, err := os.Open(filepath.Join(dir, checkpointfiles.PagesFileName))
	if err != nil {
		closeFiles(files)
		return nil, false, err
	}
	return append(files, pages), true, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// pendingRestore is a restore over the control socket begun before its
// image is whole: runsc's state lock held, the control connection open
// and the network arguments sent, as `runsc restore --background` does
// before its Restore call. finish makes that call.
type pendingRestore struct {
	sf *stateFile
	c  *controlConn
}

// beginRestore starts a restore into s, a sandbox runsc created, over its
// control socket: under runsc's lock, the network arguments of a sandbox
// without a network. Nothing in it needs the image.
func (b *Backend) beginRestore(ctx context.Context, s *backend.Spec) (*pendingRestore, error) {
	sf, err := lockState(ctx, layout{s.Dir}.runscRoot(), s.ID)
	if err != nil {
		return nil, err
	}
	if err := b.requireState(s, sf.st, "restore", "created"); err != nil {
		sf.unlock()
		return nil, err
	}
	c, err := dialControl(s.ID, sf.st.Sandbox.ControlSocketPath)
	if err != nil {
		sf.unlock()
		return nil, err
	}
	p := &pendingRestore{sf: sf, c: c}
	if err := c.call(ctx, methodNetworkArgs, &networkArgs{LoopbackLinks: []loopbackLink{loopback()}, IsRestore: true}); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// finish restores the image in dir, then, as runsc does under its lock,
// records the sandbox running and restored.
func (p *pendingRestore) finish(ctx context.Context, dir string) error {
	defer p.close()
	files, pages, err := openImage(dir)
	if err != nil {
		return err
	}
	defer closeFiles(files)
	if err := p.c.call(ctx, methodRestore, &restoreOpts{filePayload: filePayload{Files: files}, HavePagesFile: pages, Background: true}); err != nil {
		return err
	}
	return p.sf.save("running", true)
}

func (p *pendingRestore) close() {
	p.c.close()
	p.sf.unlock()
}

// startControl is `runsc start` of a created sandbox without a network
// (runsc --network=none), over the control socket: under runsc's lock, the
// loopback's network arguments, the StartRoot call, and the status
// "running" in the state file. runsc start does nothing else for such a
// sandbox: ociSpec gives it no hooks, no oom_score_adj and no IPv6 sysctl
// (TestStartControlSpec). The runsc process it saves was 30 of the 75 ms
// p50 of a start and its agent's answer at load ~14 (interleaved, n=20).
func (b *Backend) startControl(ctx context.Context, s *backend.Spec) error {
	sf, err := lockState(ctx, layout{s.Dir}.runscRoot(), s.ID)
	if err != nil {
		return err
	}
	defer sf.unlock()
	if err := b.requireState(s, sf.st, "start", "created"); err != nil {
		return err
	}
	c, err := dialControl(s.ID, sf.st.Sandbox.ControlSocketPath)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.call(ctx, methodNetworkArgs, &networkArgs{LoopbackLinks: []loopbackLink{loopback()}}); err != nil {
		return err
	}
	id := s.ID
	if err := c.call(ctx, methodStartRoot, &id); err != nil {
		return err
	}
	return sf.save("running", false)
}

// pauseControl and resumeControl are runsc pause and resume.
func (b *Backend) pauseControl(ctx context.Context, s *backend.Spec) error {
	return b.transition(ctx, s, "pause", methodPause, "paused", "created", "running")
}

func (b *Backend) resumeControl(ctx context.Context, s *backend.Spec) error {
	return b.transition(ctx, s, "resume", methodResume, "running", "paused")
}

// transition makes a call that moves the container from one of states to
// status, under runsc's lock as runsc does.
func (b *Backend) transition(ctx context.Context, s *backend.Spec, op, method, status string, states ...string) error {
	sf, err := lockState(ctx, layout{s.Dir}.runscRoot(), s.ID)
	if err != nil {
		return err
	}
	defer sf.unlock()
	if err := b.requireState(s, sf.st, op, states...); err != nil {
		return err
	}
	if err := controlCall(ctx, s.ID, sf.st.Sandbox.ControlSocketPath, method, nil); err != nil {
		return err
	}
	return sf.save(status, false)
}

// requireState refuses a container whose sandbox is gone or whose status
// is none of states, as runsc would.
func (b *Backend) requireState(s *backend.Spec, st runscState, op string, states ...string) error {
	if !liveOn(st.Sandbox.Pid, layout{s.Dir}.runscRoot()) {
		if st.Status == "created" {
			return fmt.Errorf("%s: %w: the sandbox died while it waited to be started", s.ID, backend.ErrNotRunning)
		}
		return fmt.Errorf("%s: %w: the sandbox process is gone", s.ID, backend.ErrNotRunning)
	}
	for _, want := range states {
		if st.Status == want {
			return nil
		}
	}
	return fmt.Errorf("%s: cannot %s a container in state %s", s.ID, op, st.Status)
}
