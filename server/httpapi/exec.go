package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

// A client that disconnects from an exec stream (plain or WebSocket) ends
// the command: the request's context is cancelled, which closes the
// connection to the sandbox's agent, and the agent kills the command's
// process group. Nothing keeps running unobserved; a command meant to
// outlive its client must be started detached (nohup … &) by a short exec.

// process checks an exec request and turns it into the agent's terms.
func process(req *api.ExecRequest) (sandbox.Process, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return sandbox.Process{}, invalid("args", `field "args": required: the command and its arguments`)
	}
	if err := checkEnv("env", req.Env); err != nil {
		return sandbox.Process{}, err
	}
	p := sandbox.Process{Args: req.Args, Env: req.Env, Dir: req.WorkDir, User: req.User, TTY: req.TTY,
		TimeoutMS: time.Duration(req.Timeout).Milliseconds()}
	if req.TTY && (req.Rows > 0 || req.Cols > 0) {
		p.Size = &sandbox.Size{Rows: req.Rows, Cols: req.Cols}
	}
	return p, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := decode(r.Body, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.TTY {
		writeError(w, invalid("tty", `field "tty": a terminal needs the WebSocket endpoint (GET …/exec/ws)`))
		return
	}
	p, err := process(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	st := newStream(w, r)
	stdio := sandbox.Stdio{Stdout: output{st, "stdout", false}, Stderr: output{st, "stderr", false}}
	if req.Stdin != nil {
		stdio.Stdin = strings.NewReader(*req.Stdin)
	}
	exit, err := s.o.Manager.Exec(r.Context(), r.PathValue("id"), p, stdio)
	if err != nil {
		if r.Context().Err() == nil {
			st.fail(err)
		}
		return
	}
	st.send("exit", api.ExecEvent{Type: "exit", Exit: &exit})
}

// execWS runs a command over a WebSocket: the client's first message is
// an ExecRequest (text); then binary messages tagged StreamStdin carry
// input and text WSControl messages resize, signal or close stdin. The
// server sends tagged output and, last, a WSControl with the exit.
func (s *Server) execWS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Fail before the upgrade where we can, with an ordinary status.
	if _, err := s.o.Manager.Get(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := r.Context()
	closeWith := func(e *api.Error) {
		b, _ := json.Marshal(api.WSControl{Error: e})
		c.Write(ctx, websocket.MessageText, b)
		c.Close(websocket.StatusPolicyViolation, truncate(e.Message, 120))
	}

	// The request comes at once or not at all: a connection that sends
	// nothing must not hold its slot (the WebSocket's body is not paced).
	firstCtx, cancelFirst := context.WithTimeout(ctx, s.o.BodyTimeout)
	typ, first, err := c.Read(firstCtx)
	cancelFirst()
	if err != nil {
		return
	}
	var req api.ExecRequest
	if typ != websocket.MessageText {
		closeWith(invalid("", "first message: want a JSON ExecRequest as text"))
		return
	}
	if err := decode(strings.NewReader(string(first)), &req); err != nil {
		closeWith(errorFor(err))
		return
	}
	p, err := process(&req)
	if err != nil {
		closeWith(errorFor(err))
		return
	}
	// Output writes come from one goroutine (the agent client's reader),
	// the exit after it: no two writes overlap.
	stdio := sandbox.Stdio{Stdout: wsOutput{ctx, c, api.StreamStdout}, Stderr: wsOutput{ctx, c, api.StreamStderr}}
	stdinR, stdinW := io.Pipe()
	resize := make(chan sandbox.Size, 4)
	signals := make(chan syscall.Signal, 4)
	stdio.Stdin, stdio.Resize, stdio.Signals = stdinR, resize, signals
	execCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// A read error is the client leaving: cancel, which kills the
		// command (see the rule at the top of this file).
		defer cancel()
		err := wsInput(execCtx, c, stdinW, resize, signals)
		stdinW.CloseWithError(err)
	}()
	exit, err := s.o.Manager.Exec(execCtx, id, p, stdio)
	stdinR.Close()
	if err != nil {
		if ctx.Err() == nil && execCtx.Err() == nil {
			closeWith(errorFor(err))
		}
		return
	}
	b, _ := json.Marshal(api.WSControl{Exit: &exit})
	if c.Write(ctx, websocket.MessageText, b) == nil {
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// wsInput reads the client's messages until stdin's end, then keeps
// reading control messages until the connection ends.
func wsInput(ctx context.Context, c *websocket.Conn, stdin *io.PipeWriter, resize chan<- sandbox.Size, signals chan<- syscall.Signal) error {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			if len(b) == 0 || b[0] != api.StreamStdin {
				continue
			}
			if _, err := stdin.Write(b[1:]); err != nil && !errors.Is(err, io.ErrClosedPipe) {
				return err
			}
			continue
		}
		var m api.WSControl
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if m.Resize != nil {
			select {
			case resize <- *m.Resize:
			default: // a newer size follows
			}
		}
		if m.Signal > 0 && m.Signal < 65 {
			select {
			case signals <- syscall.Signal(m.Signal):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if m.EOF {
			stdin.Close()
		}
	}
}

type wsOutput struct {
	ctx context.Context
	c   *websocket.Conn
	tag byte
}

func (o wsOutput) Write(p []byte) (int, error) {
	msg := make([]byte, 1+len(p))
	msg[0] = o.tag
	copy(msg[1:], p)
	if err := o.c.Write(o.ctx, websocket.MessageBinary, msg); err != nil {
		return 0, err
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	st := newStream(w, r)
	err = s.o.Manager.Logs(r.Context(), r.PathValue("id"), sandbox.LogOptions{Follow: follow,
		Stdout: output{st, "stdout", true}, Stderr: output{st, "stderr", true}})
	if err != nil && r.Context().Err() == nil {
		st.fail(err)
		return
	}
	st.begin() // no output at all is still a stream, just an empty one
}

// keepalive is how often an idle event stream sends a comment.
const keepalive = 15 * time.Second

// events streams lifecycle events (SSE, or NDJSON) until the client goes.
// A client that falls too far behind is cut off, and must list again.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	evs, stop := s.o.Manager.Subscribe(r.Context())
	defer stop()
	st := newStream(w, r)
	// Send the headers now: a client waits for them before it listens.
	if st.comment() != nil {
		return
	}
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-evs:
			if !ok || st.send(e.Type, e) != nil {
				return
			}
		case <-t.C:
			if st.comment() != nil {
				return
			}
		}
	}
}
