package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

// Exec runs p in a sandbox, streaming its output to stdio as it comes, and
// returns its exit, with the same meaning as manager.Manager.Exec. Plain
// commands go over one streamed POST; a TTY, streamed stdin, resizes or
// signals use a WebSocket. Cancelling ctx (or losing the connection)
// kills the command.
func (c *Client) Exec(ctx context.Context, ref string, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	req := api.ExecRequest{Args: p.Args, Env: p.Env, WorkDir: p.Dir, User: p.User,
		Timeout: api.Duration(time.Duration(p.TimeoutMS) * time.Millisecond), TTY: p.TTY}
	if p.Size != nil {
		req.Rows, req.Cols = p.Size.Rows, p.Size.Cols
	}
	if p.TTY || stdio.Stdin != nil || stdio.Resize != nil || stdio.Signals != nil {
		return c.execWS(ctx, ref, req, stdio)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return sandbox.Exit{}, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, path: sbPath(ref, "/exec"), body: strings.NewReader(string(b)), contentType: "application/json"})
	if err != nil {
		return sandbox.Exit{}, err
	}
	defer resp.Body.Close()
	var exit *sandbox.Exit
	err = eachLine(resp.Body, func(line []byte) error {
		var ev api.ExecEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("smolvm server: bad exec event: %w", err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			w := stdio.Stdout
			if ev.Type == "stderr" {
				w = stdio.Stderr
			}
			return writeData(w, ev.Data, ev.Encoding)
		case "exit":
			exit = ev.Exit
		case "error":
			if ev.Error != nil {
				return fromAPI(0, ev.Error)
			}
		}
		return nil
	})
	if err == nil && exit == nil {
		err = errors.New("smolvm server: exec stream ended without an exit")
	}
	if err != nil {
		if ctx.Err() != nil {
			return sandbox.Exit{}, ctx.Err()
		}
		return sandbox.Exit{}, err
	}
	return *exit, nil
}

func writeData(w io.Writer, data, encoding string) error {
	if w == nil {
		return nil
	}
	p, err := (api.ExecEvent{Data: data, Encoding: encoding}).Bytes()
	if err != nil {
		return err
	}
	_, err = w.Write(p)
	return err
}

func (c *Client) execWS(ctx context.Context, ref string, req api.ExecRequest, stdio sandbox.Stdio) (sandbox.Exit, error) {
	u := "ws" + strings.TrimPrefix(c.base, "http") + sbPath(ref, "/exec/ws")
	h := http.Header{}
	c.auth(h)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			return sandbox.Exit{}, readError(resp)
		}
		return sandbox.Exit{}, fmt.Errorf("smolvm server: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(4 << 20)
	first, err := json.Marshal(req)
	if err != nil {
		return sandbox.Exit{}, err
	}
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return sandbox.Exit{}, fmt.Errorf("smolvm server: %w", err)
	}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	go pumpWS(sendCtx, conn, stdio)
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return sandbox.Exit{}, ctx.Err()
			}
			return sandbox.Exit{}, fmt.Errorf("smolvm server: exec connection lost: %w", err)
		}
		if typ == websocket.MessageBinary {
			if len(b) == 0 {
				continue
			}
			w := stdio.Stdout
			if b[0] == api.StreamStderr {
				w = stdio.Stderr
			}
			if w != nil {
				if _, err := w.Write(b[1:]); err != nil {
					return sandbox.Exit{}, fmt.Errorf("write output: %w", err)
				}
			}
			continue
		}
		var m api.WSControl
		if err := json.Unmarshal(b, &m); err != nil {
			return sandbox.Exit{}, fmt.Errorf("smolvm server: bad exec message: %w", err)
		}
		if m.Error != nil {
			return sandbox.Exit{}, fromAPI(0, m.Error)
		}
		if m.Exit != nil {
			conn.Close(websocket.StatusNormalClosure, "")
			return *m.Exit, nil
		}
	}
}

// pumpWS sends stdin, resizes and signals until they end or ctx does.
func pumpWS(ctx context.Context, conn *websocket.Conn, stdio sandbox.Stdio) {
	control := func(m api.WSControl) error {
		b, _ := json.Marshal(m)
		return conn.Write(ctx, websocket.MessageText, b)
	}
	go func() {
		resize, sigs := stdio.Resize, stdio.Signals
		for resize != nil || sigs != nil {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-resize:
				if !ok {
					resize = nil
				} else if control(api.WSControl{Resize: &sz}) != nil {
					return
				}
			case sig, ok := <-sigs:
				if !ok {
					sigs = nil
				} else if control(api.WSControl{Signal: int(sig)}) != nil {
					return
				}
			}
		}
	}()
	if stdio.Stdin == nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := stdio.Stdin.Read(buf)
		if n > 0 {
			msg := append([]byte{api.StreamStdin}, buf[:n]...)
			if conn.Write(ctx, websocket.MessageBinary, msg) != nil {
				return
			}
		}
		if err != nil {
			control(api.WSControl{EOF: true})
			return
		}
	}
}

// Logs writes a sandbox's main-process output to o's writers; with
// o.Follow it goes on until the sandbox stops or ctx ends.
func (c *Client) Logs(ctx context.Context, ref string, o sandbox.LogOptions) error {
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: sbPath(ref, "/logs"), query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = eachLine(resp.Body, func(line []byte) error {
		var ev struct {
			api.LogEvent
			Type  string     `json:"type"`
			Error *api.Error `json:"error"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("smolvm server: bad log event: %w", err)
		}
		if ev.Error != nil {
			return fromAPI(0, ev.Error)
		}
		w := o.Stdout
		if ev.Stream == "stderr" {
			w = o.Stderr
		}
		return writeData(w, ev.Data, ev.Encoding)
	})
	if ctx.Err() != nil {
		// Following ends with the caller, as it does for the Manager.
		return nil
	}
	return err
}
