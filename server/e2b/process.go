package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// Commands follow envd's rule: a command outlives the request that started
// it. When the client disconnects mid-stream (or never reads the stream,
// as with background commands), the command keeps running until it exits
// or its timeout (the call's Connect-Timeout-Ms, the SDK's timeoutMs; 0 is
// none) ends, and Process.Connect attaches to it again by pid or tag.
// Output produced while nobody is attached is not kept, as in envd.
//
// The process table lives in the server's memory: commands run over agent
// connections the server holds, and the agent kills a command whose host
// connection closes, so a server restart ends them. Their pids are the
// server's own handles, unique for its lifetime, not the sandbox's pids.

// The process service's messages, with protobuf's JSON names.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  string            `json:"cwd,omitempty"`
}

type ptySize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

type ptyConfig struct {
	Size *ptySize `json:"size"`
}

type startRequest struct {
	Process *processConfig `json:"process"`
	PTY     *ptyConfig     `json:"pty"`
	Tag     *string        `json:"tag"`
	Stdin   *bool          `json:"stdin"`
}

type selector struct {
	PID *uint32 `json:"pid"`
	Tag *string `json:"tag"`
}

type selectorRequest struct {
	Process *selector `json:"process"`
}

type processInput struct {
	Stdin []byte `json:"stdin"`
	PTY   []byte `json:"pty"`
}

type sendInputRequest struct {
	Process *selector     `json:"process"`
	Input   *processInput `json:"input"`
}

type sendSignalRequest struct {
	Process *selector `json:"process"`
	Signal  signal    `json:"signal"`
}

type updateRequest struct {
	Process *selector  `json:"process"`
	PTY     *ptyConfig `json:"pty"`
}

// signal is process.Signal: protobuf JSON sends the enum's name, but a
// number is valid too.
type signal syscall.Signal

var signalNames = map[string]syscall.Signal{"SIGNAL_SIGKILL": syscall.SIGKILL, "SIGNAL_SIGTERM": syscall.SIGTERM}

func (s *signal) UnmarshalJSON(b []byte) error {
	var name string
	if json.Unmarshal(b, &name) == nil {
		sig, ok := signalNames[name]
		if !ok {
			return fmt.Errorf("unknown signal %q", name)
		}
		*s = signal(sig)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if n != int(syscall.SIGKILL) && n != int(syscall.SIGTERM) {
		return fmt.Errorf("unknown signal %d", n)
	}
	*s = signal(n)
	return nil
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32  `json:"exitCode"`
	Exited   bool   `json:"exited"`
	Status   string `json:"status"`
	Error    string `json:"error,omitempty"`
}

type eventResponse struct {
	Event processEvent `json:"event"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    string        `json:"tag,omitempty"`
}

// procTable holds the commands started through envd, per sandbox.
type procTable struct {
	ctx    context.Context // ends every command (Handler.Close)
	cancel context.CancelFunc

	mu    sync.Mutex
	next  uint32
	procs map[string]map[uint32]*process // sandbox ID → pid → process
}

func newProcTable() *procTable {
	ctx, cancel := context.WithCancel(context.Background())
	return &procTable{ctx: ctx, cancel: cancel, next: 1, procs: map[string]map[uint32]*process{}}
}

func (t *procTable) add(sandboxID string, p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.pid = t.next
	t.next++
	if t.procs[sandboxID] == nil {
		t.procs[sandboxID] = map[uint32]*process{}
	}
	t.procs[sandboxID][p.pid] = p
}

func (t *procTable) remove(sandboxID string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs[sandboxID], pid)
	if len(t.procs[sandboxID]) == 0 {
		delete(t.procs, sandboxID)
	}
}

// find returns the running command sel names.
func (t *procTable) find(sandboxID string, sel *selector) (*process, *rpcError) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return nil, rpcErrorf(codeInvalidArgument, "process: a pid or tag is required")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs[sandboxID] {
		if (sel.PID != nil && p.pid == *sel.PID) || (sel.PID == nil && p.tag == *sel.Tag) {
			return p, nil
		}
	}
	if sel.PID != nil {
		return nil, rpcErrorf(codeNotFound, "process with pid %d not found", *sel.PID)
	}
	return nil, rpcErrorf(codeNotFound, "process with tag %q not found", *sel.Tag)
}

func (t *procTable) list(sandboxID string) []*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := slices.Collect(maps.Values(t.procs[sandboxID]))
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	return ps
}

// forget kills a removed sandbox's commands.
func (t *procTable) forget(sandboxID string) {
	for _, p := range t.list(sandboxID) {
		p.kill()
	}
}

func (t *procTable) killAll() { t.cancel() }

// process is one running command and the clients attached to its output.
type process struct {
	pid     uint32
	tag     string
	cfg     processConfig
	stdin   *io.PipeWriter // nil when the command reads /dev/null
	tty     bool
	signals chan syscall.Signal
	resize  chan sandbox.Size
	cancel  context.CancelFunc

	mu   sync.Mutex
	subs map[*subscriber]bool

	// done is closed when the command has ended; end, or execErr when the
	// command could not be run at all (sandbox gone, policy), are set
	// before and never change after.
	done    chan struct{}
	end     endEvent
	execErr error
}

type subscriber struct {
	events chan processEvent
	gone   chan struct{}
}

func (p *process) subscribe() *subscriber {
	s := &subscriber{events: make(chan processEvent, 64), gone: make(chan struct{})}
	p.mu.Lock()
	p.subs[s] = true
	p.mu.Unlock()
	return s
}

func (p *process) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// broadcast hands ev to every attached client. A slow client slows the
// command (its pipe fills), as a terminal would; a client that leaves
// stops counting at once.
func (p *process) broadcast(ev processEvent) {
	p.mu.Lock()
	subs := slices.Collect(maps.Keys(p.subs))
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.events <- ev:
		case <-s.gone:
		}
	}
}

// kill ends the command: SIGKILL to its process group, and the agent
// connection closed in case the agent is beyond reach.
func (p *process) kill() {
	select {
	case p.signals <- syscall.SIGKILL:
	default:
	}
	p.cancel()
}

// output turns one stream of the command into data events.
type output struct {
	p    *process
	kind string
}

func (o output) Write(b []byte) (int, error) {
	d := &dataEvent{}
	c := append([]byte(nil), b...)
	switch {
	case o.p.tty:
		d.PTY = c
	case o.kind == "stderr":
		d.Stderr = c
	default:
		d.Stdout = c
	}
	o.p.broadcast(processEvent{Data: d})
	return len(b), nil
}

// endOf turns an agent exit into envd's end event. envd reports a command
// killed by a signal with exit code -1 and exited false, as Go's
// ProcessState does, and sends Wait's error as the error: "exit status N"
// or "signal: killed", which the SDK's CommandExitError takes as its
// message.
func endOf(e sandbox.Exit) endEvent {
	switch {
	case e.Signal != 0:
		end := endEvent{ExitCode: -1, Status: "signal: " + syscall.Signal(e.Signal).String()}
		end.Error = end.Status
		if e.TimedOut {
			end.Error = e.Error
		}
		return end
	case e.Error != "":
		// The command could not start: bash missing, a bad user or cwd.
		return endEvent{ExitCode: int32(e.Code), Status: "exit status " + strconv.Itoa(e.Code), Error: e.Error}
	}
	end := endEvent{ExitCode: int32(e.Code), Exited: true, Status: "exit status " + strconv.Itoa(e.Code)}
	if e.Code != 0 {
		end.Error = end.Status
	}
	return end
}

// start answers Process.Start: it starts the command, then streams its
// events to the caller for as long as the caller stays.
func (h *Handler) start(c *envdCall) {
	var req startRequest
	if rerr := readEnveloped(c.r, &req); rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	if req.Process == nil || req.Process.Cmd == "" {
		envdError(c.w, c.r, rpcErrorf(codeInvalidArgument, "process.cmd: required"))
		return
	}
	timeout, rerr := connectTimeout(c.r)
	if rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	cfg := *req.Process
	ap := sandbox.Process{
		Args:      append([]string{cfg.Cmd}, cfg.Args...),
		Dir:       cfg.Cwd,
		User:      c.user,
		TimeoutMS: timeout.Milliseconds(),
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Envs)) {
		ap.Env = append(ap.Env, k+"="+cfg.Envs[k])
	}
	ctx, cancel := context.WithCancel(h.procs.ctx)
	p := &process{
		cfg: cfg, signals: make(chan syscall.Signal, 4), resize: make(chan sandbox.Size, 4),
		cancel: cancel, subs: map[*subscriber]bool{}, done: make(chan struct{}),
	}
	if req.Tag != nil {
		p.tag = *req.Tag
	}
	stdio := sandbox.Stdio{Stdout: output{p, "stdout"}, Stderr: output{p, "stderr"}, Signals: p.signals, Resize: p.resize}
	if req.PTY != nil {
		p.tty = true
		ap.TTY = true
		if req.PTY.Size != nil {
			ap.Size = &sandbox.Size{Rows: uint16(req.PTY.Size.Rows), Cols: uint16(req.PTY.Size.Cols)}
		}
	}
	if p.tty || (req.Stdin != nil && *req.Stdin) {
		pr, pw := io.Pipe()
		stdio.Stdin, p.stdin = pr, pw
	}
	h.procs.add(c.sb.ID, p)
	sub := p.subscribe()
	go func() {
		defer cancel()
		exit, err := h.m.Exec(ctx, c.sb.ID, ap, stdio)
		if p.stdin != nil {
			p.stdin.Close() // lets the agent client's stdin pump end
		}
		p.end, p.execErr = endOf(exit), err
		h.procs.remove(c.sb.ID, p.pid)
		close(p.done)
	}()
	h.stream(c, p, sub)
}

// connectProcess answers Process.Connect: attach to a running command.
func (h *Handler) connectProcess(c *envdCall) {
	var req selectorRequest
	if rerr := readEnveloped(c.r, &req); rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	p, rerr := h.procs.find(c.sb.ID, req.Process)
	if rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	h.stream(c, p, p.subscribe())
}

// stream sends a start event, then the command's output and end event,
// with keepalives at the interval the SDK asks for so that idle commands
// keep their connection.
func (h *Handler) stream(c *envdCall, p *process, sub *subscriber) {
	defer p.unsubscribe(sub)
	st := newStream(c.w)
	if st.Send(eventResponse{processEvent{Start: &startEvent{PID: p.pid}}}) != nil {
		return
	}
	tick := time.NewTicker(keepaliveInterval(c.r))
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.events:
			if st.Send(eventResponse{ev}) != nil {
				return
			}
		case <-p.done:
			// Output written before the exit may still be queued.
		drain:
			for {
				select {
				case ev := <-sub.events:
					if st.Send(eventResponse{ev}) != nil {
						return
					}
				default:
					break drain
				}
			}
			if p.execErr != nil {
				st.End(rpcFrom(p.execErr))
				return
			}
			if st.Send(eventResponse{processEvent{End: &p.end}}) == nil {
				st.End(nil)
			}
			return
		case <-tick.C:
			if st.Send(eventResponse{processEvent{Keepalive: &struct{}{}}}) != nil {
				return
			}
		case <-c.r.Context().Done():
			// The client left; the command runs on (see the rule above).
			return
		}
	}
}

func (h *Handler) listProcesses(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	out := struct {
		Processes []processInfo `json:"processes"`
	}{Processes: []processInfo{}}
	for _, p := range h.procs.list(c.sb.ID) {
		out.Processes = append(out.Processes, processInfo{Config: p.cfg, PID: p.pid, Tag: p.tag})
	}
	return out, nil
}

func (h *Handler) sendInput(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req sendInputRequest
	if rerr := decodeMessage(raw, &req); rerr != nil {
		return nil, rerr
	}
	p, rerr := h.procs.find(c.sb.ID, req.Process)
	if rerr != nil {
		return nil, rerr
	}
	if req.Input == nil {
		return nil, rpcErrorf(codeInvalidArgument, "input: required")
	}
	if p.stdin == nil {
		return nil, rpcErrorf(codeFailedPrecond, "process %d was started without stdin", p.pid)
	}
	data := req.Input.Stdin
	if p.tty {
		data = req.Input.PTY
	}
	if _, err := p.stdin.Write(data); err != nil {
		return nil, rpcErrorf(codeNotFound, "process %d: %v", p.pid, err)
	}
	return struct{}{}, nil
}

func (h *Handler) closeStdin(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req selectorRequest
	if rerr := decodeMessage(raw, &req); rerr != nil {
		return nil, rerr
	}
	p, rerr := h.procs.find(c.sb.ID, req.Process)
	if rerr != nil {
		return nil, rerr
	}
	if p.stdin == nil {
		return nil, rpcErrorf(codeFailedPrecond, "process %d was started without stdin", p.pid)
	}
	p.stdin.Close()
	return struct{}{}, nil
}

func (h *Handler) sendSignal(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req sendSignalRequest
	if rerr := decodeMessage(raw, &req); rerr != nil {
		return nil, rerr
	}
	p, rerr := h.procs.find(c.sb.ID, req.Process)
	if rerr != nil {
		return nil, rerr
	}
	if req.Signal == 0 {
		return nil, rpcErrorf(codeInvalidArgument, "signal: required (SIGNAL_SIGKILL or SIGNAL_SIGTERM)")
	}
	select {
	case p.signals <- syscall.Signal(req.Signal):
	case <-p.done:
		return nil, rpcErrorf(codeNotFound, "process %d has exited", p.pid)
	case <-ctx.Done():
		return nil, rpcErrorf(codeUnavailable, "%v", ctx.Err())
	}
	return struct{}{}, nil
}

func (h *Handler) update(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req updateRequest
	if rerr := decodeMessage(raw, &req); rerr != nil {
		return nil, rerr
	}
	p, rerr := h.procs.find(c.sb.ID, req.Process)
	if rerr != nil {
		return nil, rerr
	}
	if req.PTY == nil || req.PTY.Size == nil {
		return struct{}{}, nil
	}
	if !p.tty {
		return nil, rpcErrorf(codeFailedPrecond, "process %d has no terminal", p.pid)
	}
	select {
	case p.resize <- sandbox.Size{Rows: uint16(req.PTY.Size.Rows), Cols: uint16(req.PTY.Size.Cols)}:
	case <-p.done:
	}
	return struct{}{}, nil
}
