package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// Config is what the host tells the agent at boot. The host writes it as
// JSON into the sandbox's run directory.
type Config struct {
	// Socket is where the agent listens, inside the sandbox.
	Socket string `json:"socket"`
	// Serial, instead of Socket, names the virtio-serial port the agent
	// serves (a microVM's): the host's streams come multiplexed over it
	// (see Mux).
	Serial string `json:"serial,omitempty"`
	// Env is the sandbox's base environment (image env + user env).
	Env []string `json:"env"`
	Dir string   `json:"dir,omitempty"`
	// User is the default user for the main process and execs.
	User string `json:"user,omitempty"`
	// Main, when set, is the sandbox's main command. When it exits, the
	// agent records its status in ExitFile and the sandbox stops.
	Main     *sandbox.Process `json:"main,omitempty"`
	LogFile  string           `json:"log_file"`
	ExitFile string           `json:"exit_file"`
	// LogLimit caps the main process log; past it the log is rotated once.
	LogLimit int64 `json:"log_limit,omitempty"`
	// Deadline, when set, is the end of the sandbox's time to live: the
	// agent stops everything then, so expiry needs no daemon.
	Deadline *time.Time `json:"deadline,omitempty"`
	// IdleTimeout, when set, stops the sandbox once no host operation
	// (exec, file transfer) has been open for that long. The agent sees
	// every operation, so it can tell without a daemon.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Pids caps the number of processes and threads the sandbox's
	// workload may have. The agent itself stays outside the cap, so a fork
	// bomb cannot take away the host's way in.
	Pids int64 `json:"pids,omitempty"`
	// ResumeFile is where the host leaves the Identity that ends a
	// quiesce (see OpQuiesce).
	ResumeFile string `json:"resume_file,omitempty"`
	// QuiesceTimeout ends a quiesce that no identity ended: the agent
	// serves again as itself, so a host that died mid-checkpoint does not
	// leave the sandbox unreachable. 0 is DefaultQuiesceTimeout.
	QuiesceTimeout time.Duration `json:"quiesce_timeout,omitempty"`
	// MachineID is written to /etc/machine-id at boot.
	MachineID string `json:"machine_id,omitempty"`
}

// Server is the agent's state.
type Server struct {
	reaper *reaper

	mu       sync.Mutex
	cfg      Config
	ln       net.Listener
	mux      *Mux // over the serial port, if Config.Serial is set
	conns    map[net.Conn]bool
	deadline chan *time.Time // deadline changes, after a restore
	// quiesced is set while the agent has dropped its host connections
	// for a checkpoint; lost clients then do not kill their commands.
	quiesced bool
	// cgroup is an open workload cgroup directory; children are cloned
	// straight into it (CLONE_INTO_CGROUP), so none escapes the limit.
	cgroup int
	// active counts open host operations; idleSince is when the last one
	// ended (or the agent started), for the idle timeout.
	active    int
	idleSince time.Time
}

// Serve runs the agent until ctx ends or the main process exits, returning
// the status the agent should exit with.
func Serve(ctx context.Context, cfg Config) (int, error) {
	s := &Server{cfg: cfg, reaper: newReaper(ctx), cgroup: -1, conns: map[net.Conn]bool{}, deadline: make(chan *time.Time, 1), idleSince: time.Now()}
	// Before listening: a client may move the deadline at once.
	s.deadline <- cfg.Deadline
	if cfg.Pids > 0 {
		fd, err := workloadCgroup(cgroupRoot, cfg.Pids)
		if err != nil {
			return 1, fmt.Errorf("pids limit: %w", err)
		}
		s.cgroup = fd
	}
	if cfg.MachineID != "" {
		writeMachineID(cfg.MachineID)
	}
	if cfg.Serial != "" {
		port, err := SerialPort(cfg.Serial)
		if err != nil {
			return 1, err
		}
		defer port.Close()
		s.mux = NewMux(port)
		runDir := filepath.Dir(cfg.ExitFile)
		s.mux.ReceiveFiles(runDir, mirroredIn)
		mr := &mirror{m: s.mux, dir: runDir, off: map[string]int64{}}
		if err := mr.watch(); err != nil {
			return 1, err
		}
		// The agent exiting ends the VM: the host must have the exit.
		defer mr.flush()
		go s.mux.RunPort(ctx)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)

	var mainDone <-chan sandbox.Exit
	if cfg.Main != nil {
		var err error
		mainDone, err = s.startMain(*cfg.Main)
		if err != nil {
			exit := errExit(err)
			s.writeExit(exit)
			return exit.Code, nil
		}
	}
	// Listen only once the main command has started: a host waiting for
	// the agent then sees either the agent or the main command's failure
	// to start (the exit file), never an agent that answers and dies.
	if err := s.listen(); err != nil {
		return 1, err
	}
	var expired <-chan time.Time
	var idleCheck <-chan time.Time
	if cfg.IdleTimeout > 0 {
		t := time.NewTicker(min(max(cfg.IdleTimeout/10, 10*time.Millisecond), time.Second))
		defer t.Stop()
		idleCheck = t.C
	}
	for {
		select {
		case d := <-s.deadline:
			// Set at boot, and again by a restore (see resume).
			expired = nil
			if d != nil {
				expired = time.After(time.Until(*d))
			}
		case e := <-mainDone:
			s.writeExit(e)
			return e.Code, nil
		case <-expired:
			return s.expire(ReasonExpired), nil
		case <-idleCheck:
			if s.idleFor() >= cfg.IdleTimeout {
				return s.expire(ReasonIdle), nil
			}
		case sig := <-sigs:
			// Stop: pass the signal on to everything, give it a moment, and
			// leave. The host escalates to SIGKILL if this takes too long.
			unix.Kill(-1, sig.(unix.Signal))
			select {
			case e := <-mainDone:
				s.writeExit(e)
				return e.Code, nil
			case <-time.After(2 * time.Second):
			}
			unix.Kill(-1, unix.SIGKILL)
			return 128 + int(sig.(unix.Signal)), nil
		case <-ctx.Done():
			return 0, nil
		}
	}
}

// Reasons the agent itself ends a sandbox, as written in the exit file.
const (
	ReasonExpired = "expired"
	ReasonIdle    = "idle"
)

// expire kills everything and records why; it returns the exit status.
func (s *Server) expire(reason string) int {
	unix.Kill(-1, unix.SIGKILL)
	e := sandbox.Exit{Code: 137, Signal: int(unix.SIGKILL), Reason: reason}
	s.writeExit(e)
	return e.Code
}

// idleFor is how long no host operation has been open.
func (s *Server) idleFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active > 0 {
		return 0
	}
	return time.Since(s.idleSince)
}

// busy marks a host operation open until the returned func is called.
func (s *Server) busy() func() {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.active--
		s.idleSince = time.Now()
		s.mu.Unlock()
	}
}

func (s *Server) writeExit(e sandbox.Exit) {
	p, _ := json.Marshal(e)
	tmp := s.cfg.ExitFile + ".tmp"
	if err := os.WriteFile(tmp, p, 0o644); err == nil {
		os.Rename(tmp, s.cfg.ExitFile)
	}
}

// listen opens the agent's socket and serves it until quiesce closes it.
func (s *Server) listen() error {
	if s.mux != nil {
		s.mu.Lock()
		s.ln, s.quiesced = s.mux.Listen(), false
		go s.accept(s.ln)
		s.mu.Unlock()
		return nil
	}
	os.Remove(s.cfg.Socket)
	ln, err := net.Listen("unix", s.cfg.Socket)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Socket, err)
	}
	s.mu.Lock()
	s.ln, s.quiesced = ln, false
	s.mu.Unlock()
	go s.accept(ln)
	return nil
}

func (s *Server) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		go func() {
			s.handle(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

func (s *Server) handle(nc net.Conn) {
	defer nc.Close()
	c := newConn(nc)
	typ, p, err := c.read()
	if err != nil {
		return
	}
	var req Request
	if typ != frameRequest || json.Unmarshal(p, &req) != nil {
		c.writeJSON(frameExit, sandbox.Exit{Code: 125, Error: "malformed request", Kind: sandbox.KindInvalid})
		return
	}
	if req.Op != OpPing {
		defer s.busy()()
	}
	var exit sandbox.Exit
	switch req.Op {
	case OpPing:
	case OpDeadline:
		s.setDeadline(req.Deadline)
	case OpExec:
		if req.Exec == nil || len(req.Exec.Args) == 0 {
			exit = sandbox.Exit{Code: 125, Error: "exec: no command", Kind: sandbox.KindInvalid}
			break
		}
		exit = s.exec(c, *req.Exec)
	case OpPut:
		exit = s.put(c, req.Path)
	case OpGet:
		exit = s.get(c, req.Path)
	case OpStat, OpList, OpMkdir, OpRemove, OpRename, OpWriteFile, OpReadFile:
		exit = s.fsOp(c, req)
	case OpWatch:
		exit = s.watch(c, req)
	case OpIdentity:
		if req.Identity == nil {
			exit = sandbox.Exit{Code: 125, Error: "identity: none given", Kind: sandbox.KindInvalid}
			break
		}
		if err := s.adopt(*req.Identity); err != nil {
			exit = sandbox.Exit{Code: 125, Error: err.Error()}
		}
	case OpSignal:
		sig := unix.Signal(req.Signal)
		if req.All {
			unix.Kill(-1, sig)
		}
		unix.Kill(os.Getpid(), sig)
	case OpDial:
		// The connection is the port's from now on: no exit frame.
		s.dialPort(nc, c, req.Port)
		return
	case OpQuiesce:
		// The answer goes out once nothing else listens or is connected,
		// so the host may checkpoint as soon as it has it.
		s.quiesce(nc, func() { c.writeJSON(frameExit, sandbox.Exit{}) })
		return
	default:
		exit = sandbox.Exit{Code: 125, Error: fmt.Sprintf("unknown op %q", req.Op), Kind: sandbox.KindInvalid}
	}
	c.writeJSON(frameExit, exit)
}

// errExit classifies a failure to start a process the way a shell does.
func errExit(err error) sandbox.Exit {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, exec.ErrNotFound):
		return sandbox.Exit{Code: 127, Error: err.Error(), Kind: sandbox.KindNotFound}
	default:
		return sandbox.Exit{Code: 126, Error: err.Error(), Kind: sandbox.KindCannotRun}
	}
}

// command builds the exec.Cmd for p with the sandbox's defaults applied.
func (s *Server) command(p sandbox.Process) (*exec.Cmd, error) {
	s.mu.Lock()
	env := MergeEnv(s.cfg.Env, p.Env)
	usr, dir := p.User, p.Dir
	if usr == "" {
		usr = s.cfg.User
	}
	if dir == "" {
		dir = s.cfg.Dir
	}
	s.mu.Unlock()
	cred, home, err := lookupUser(usr)
	if err != nil {
		return nil, err
	}
	if home != "" && !hasKey(p.Env, "HOME") {
		env = MergeEnv(env, []string{"HOME=" + home})
	}
	path, err := lookPath(p.Args[0], envValue(env, "PATH"))
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: p.Args, Env: env, Dir: dir}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if s.cgroup >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = s.cgroup
	}
	return cmd, nil
}

// exec runs p, streaming its stdio over c.
func (s *Server) exec(c *conn, p sandbox.Process) sandbox.Exit {
	cmd, err := s.command(p)
	if err != nil {
		return errExit(err)
	}
	var (
		outputs         []*os.File // read ends to pump to the client
		closeAfterStart []*os.File
		stdin           io.WriteCloser
		ptmx            *os.File
	)
	if p.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return sandbox.Exit{Code: 126, Error: "open pty: " + err.Error(), Kind: sandbox.KindCannotRun}
		}
		defer master.Close()
		if p.Size != nil {
			pty.Setsize(master, &pty.Winsize{Rows: p.Size.Rows, Cols: p.Size.Cols})
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		closeAfterStart = append(closeAfterStart, slave)
		ptmx, stdin, outputs = master, master, []*os.File{master}
	} else {
		cmd.SysProcAttr.Setpgid = true
		or, ow, err := os.Pipe()
		if err != nil {
			return sandbox.Exit{Code: 126, Error: err.Error(), Kind: sandbox.KindCannotRun}
		}
		er, ew, err := os.Pipe()
		if err != nil {
			or.Close()
			ow.Close()
			return sandbox.Exit{Code: 126, Error: err.Error(), Kind: sandbox.KindCannotRun}
		}
		cmd.Stdout, cmd.Stderr = ow, ew
		closeAfterStart = append(closeAfterStart, ow, ew)
		outputs = []*os.File{or, er}
		if p.Stdin {
			ir, iw, err := os.Pipe()
			if err != nil {
				return sandbox.Exit{Code: 126, Error: err.Error(), Kind: sandbox.KindCannotRun}
			}
			cmd.Stdin = ir
			closeAfterStart = append(closeAfterStart, ir)
			stdin = iw
		}
	}
	for _, f := range outputs {
		if f != ptmx {
			defer f.Close()
		}
	}
	pgid, done, err := s.reaper.start(cmd)
	for _, f := range closeAfterStart {
		f.Close()
	}
	if err != nil {
		if stdin != nil && stdin != ptmx {
			stdin.Close()
		}
		return errExit(err)
	}

	// Pump output until EOF.
	var pumps sync.WaitGroup
	types := []byte{frameStdout, frameStderr}
	for i, f := range outputs {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			io.Copy(frameWriter{c, types[i]}, f)
		}()
	}

	// Read client frames: stdin, resize, signals. A connection broken
	// while the command runs means the client is gone: kill the process
	// group rather than leave it running unobserved. Once the command has
	// exited, what it started in the background is left alone, as a shell
	// leaves its background jobs.
	exited := make(chan struct{})
	defer close(exited)
	var inq *stdinQueue
	if stdin != nil {
		eof := func() { stdin.Close() }
		if ptmx != nil {
			eof = func() { stdin.Write([]byte{4}) } // ^D: EOF for the terminal's reader
		}
		inq = newStdinQueue(stdin, eof)
		defer inq.stop()
	}
	go func() {
		for {
			typ, b, err := c.read()
			if err != nil {
				select {
				case <-exited:
				default:
					if !s.isQuiesced() {
						unix.Kill(-pgid, unix.SIGKILL)
					}
				}
				return
			}
			switch typ {
			case frameStdin:
				if inq != nil {
					inq.put(b)
				}
			case frameStdinEOF:
				if inq != nil {
					inq.end()
				}
			case frameResize:
				var sz sandbox.Size
				if ptmx != nil && json.Unmarshal(b, &sz) == nil {
					pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
				}
			case frameSignal:
				var sig int
				if json.Unmarshal(b, &sig) == nil && sig > 0 && sig < 65 {
					unix.Kill(-pgid, unix.Signal(sig))
				}
			}
		}
	}()

	var timeout <-chan time.Time
	if p.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(p.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var exit sandbox.Exit
	select {
	case ws := <-done:
		exit = exitOf(ws)
	case <-timeout:
		unix.Kill(-pgid, unix.SIGKILL)
		exit = exitOf(<-done)
		exit.TimedOut = true
		exit.Error = fmt.Sprintf("timed out after %s", time.Duration(p.TimeoutMS)*time.Millisecond)
	}
	// Output already written is in the pipes; drain it, but do not wait
	// forever for background children that inherited them.
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(250 * time.Millisecond):
		for _, f := range outputs {
			f.SetReadDeadline(time.Now())
		}
		<-drained
	}
	if stdin != nil && stdin != ptmx {
		stdin.Close()
	}
	return exit
}

// lookPath resolves name against pathEnv the way execvp does, telling
// "not found" (127) from "found but cannot run" (126).
func lookPath(name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		return name, checkExecutable(name)
	}
	var denied error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: is a directory", p)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: permission denied", p)
	}
	return nil
}

// lookupUser resolves "name", "uid" or "uid:gid" against the sandbox's own
// /etc/passwd. Empty means the agent's own identity (root).
func lookupUser(spec string) (*syscall.Credential, string, error) {
	if spec == "" {
		return nil, "", nil
	}
	name, group, _ := strings.Cut(spec, ":")
	var uid, gid uint64
	home := ""
	u, err := user.Lookup(name)
	if err != nil {
		u, err = user.LookupId(name)
	}
	switch {
	case err == nil:
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
		home = u.HomeDir
	default:
		n, perr := strconv.ParseUint(name, 10, 32)
		if perr != nil {
			return nil, "", fmt.Errorf("user %q: %w", name, fs.ErrNotExist)
		}
		uid, gid = n, n
	}
	if group != "" {
		n, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			g, gerr := user.LookupGroup(group)
			if gerr != nil {
				return nil, "", fmt.Errorf("group %q: %w", group, fs.ErrNotExist)
			}
			n, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
		gid = n
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, home, nil
}

// MergeEnv layers environments: a later KEY=value replaces an earlier one
// in place, so the order of first appearance is kept.
func MergeEnv(layers ...[]string) []string {
	var out []string
	idx := map[string]int{}
	for _, l := range layers {
		for _, kv := range l {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
