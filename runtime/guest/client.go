package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// Dialer opens a fresh stream to the agent.
type Dialer func(ctx context.Context) (net.Conn, error)

// UnixDialer dials the agent's socket at path.
func UnixDialer(path string) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// Client talks to one sandbox's agent.
type Client struct {
	dial Dialer
}

// NewClient returns a client that dials with d.
func NewClient(d Dialer) *Client { return &Client{dial: d} }

// ErrUnavailable means the agent could not be reached: the sandbox is not
// running, or it died mid-operation.
var ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, "sandbox agent unavailable")

// ErrNotListening is the ErrUnavailable of an operation that never
// reached the agent, so nothing of it ran: the agent is booting, closed
// for a checkpoint, or gone.
var ErrNotListening = fmt.Errorf("%w: not listening", ErrUnavailable)

// Wait polls until the agent answers a ping or ctx ends.
func (c *Client) Wait(ctx context.Context) error {
	delay := time.Millisecond
	for {
		err := c.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.do(ctx, Request{Op: OpPing}, nil)
	return err
}

// Quiesce asks the agent to drop its host connections for a checkpoint;
// it serves again once an Identity appears in its resume file.
func (c *Client) Quiesce(ctx context.Context) error {
	return opErr(c.do(ctx, Request{Op: OpQuiesce}, nil))
}

// Signal sends sig to the agent, and with all to every process first.
func (c *Client) Signal(ctx context.Context, sig syscall.Signal, all bool) error {
	return opErr(c.do(ctx, Request{Op: OpSignal, Signal: int(sig), All: all}, nil))
}

// SetDeadline moves the sandbox's deadline; nil removes it.
func (c *Client) SetDeadline(ctx context.Context, d *time.Time) error {
	return opErr(c.do(ctx, Request{Op: OpDeadline, Deadline: d}, nil))
}

// SetIdentity makes a running agent take on id; new commands run under it.
func (c *Client) SetIdentity(ctx context.Context, id Identity) error {
	return opErr(c.do(ctx, Request{Op: OpIdentity, Identity: &id}, nil))
}

// Exec runs p and returns its exit. A failure to start the command (not
// found, not executable) is an Exit with Error set, not an error; err is
// for failures of the channel itself.
func (c *Client) Exec(ctx context.Context, p sandbox.Process, io sandbox.Stdio) (sandbox.Exit, error) {
	p.Stdin = p.Stdin || io.Stdin != nil
	return c.do(ctx, Request{Op: OpExec, Exec: &p}, &io)
}

// Put extracts the tar stream r at path inside the sandbox.
func (c *Client) Put(ctx context.Context, path string, r io.Reader) error {
	return opErr(c.do(ctx, Request{Op: OpPut, Path: path}, &sandbox.Stdio{Stdin: r}))
}

// Get writes path from inside the sandbox to w as a tar stream.
func (c *Client) Get(ctx context.Context, path string, w io.Writer) error {
	return opErr(c.do(ctx, Request{Op: OpGet, Path: path}, &sandbox.Stdio{Stdout: w}))
}

func opErr(e sandbox.Exit, err error) error {
	if err != nil {
		return err
	}
	if e.Error != "" || e.Code != 0 {
		return &sandbox.OpError{Exit: e}
	}
	return nil
}

func (c *Client) do(ctx context.Context, req Request, stdio *sandbox.Stdio) (sandbox.Exit, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return sandbox.Exit{}, fmt.Errorf("%w: %v", ErrNotListening, err)
	}
	defer nc.Close()
	// Cancelling ctx closes the connection, which the agent takes as the
	// client going away.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	cn := newConn(nc)
	if err := cn.writeJSON(frameRequest, req); err != nil {
		return sandbox.Exit{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if stdio != nil {
		go pumpIn(cn, stdio)
	}
	for {
		typ, b, err := cn.read()
		if err != nil {
			if ctx.Err() != nil {
				return sandbox.Exit{}, ctx.Err()
			}
			return sandbox.Exit{}, fmt.Errorf("%w: connection lost: %v", ErrUnavailable, err)
		}
		switch typ {
		case frameStdout, frameStderr:
			w := io.Discard
			if stdio != nil && typ == frameStdout && stdio.Stdout != nil {
				w = stdio.Stdout
			} else if stdio != nil && typ == frameStderr && stdio.Stderr != nil {
				w = stdio.Stderr
			}
			if _, err := w.Write(b); err != nil {
				return sandbox.Exit{}, fmt.Errorf("write output: %w", err)
			}
		case frameExit:
			var e sandbox.Exit
			if err := json.Unmarshal(b, &e); err != nil {
				return sandbox.Exit{}, fmt.Errorf("%w: bad exit frame: %v", ErrUnavailable, err)
			}
			return e, nil
		}
	}
}

// pumpIn forwards stdin, resizes and signals until they end or the
// connection breaks.
func pumpIn(cn *conn, s *sandbox.Stdio) {
	if s.Resize != nil || s.Signals != nil {
		go func() {
			resize, sigs := s.Resize, s.Signals
			for resize != nil || sigs != nil {
				select {
				case sz, ok := <-resize:
					if !ok {
						resize = nil
						continue
					}
					if cn.writeJSON(frameResize, sz) != nil {
						return
					}
				case sig, ok := <-sigs:
					if !ok {
						sigs = nil
						continue
					}
					if cn.writeJSON(frameSignal, int(sig)) != nil {
						return
					}
				}
			}
		}()
	}
	if s.Stdin == nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Stdin.Read(buf)
		if n > 0 {
			if cn.write(frameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				cn.write(frameStdinEOF, nil)
			} else {
				cn.write(frameStdinAbort, nil)
			}
			return
		}
	}
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	return fi, c.fsJSON(ctx, Request{Op: OpStat, Path: path}, nil, &fi)
}

// List describes the entries under the directory path, depth levels deep.
func (c *Client) List(ctx context.Context, path string, depth int) ([]sandbox.FileInfo, error) {
	var fis []sandbox.FileInfo
	return fis, c.fsJSON(ctx, Request{Op: OpList, Path: path, Depth: depth}, nil, &fis)
}

// Mkdir creates path and its parents; it fails with sandbox.KindExists when path
// is already there.
func (c *Client) Mkdir(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	return fi, c.fsJSON(ctx, Request{Op: OpMkdir, Path: path}, nil, &fi)
}

// Remove deletes path and everything under it.
func (c *Client) Remove(ctx context.Context, path string) error {
	return c.fsJSON(ctx, Request{Op: OpRemove, Path: path}, nil, nil)
}

// Rename moves from to to and describes the result.
func (c *Client) Rename(ctx context.Context, from, to string) (sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	return fi, c.fsJSON(ctx, Request{Op: OpRename, Path: from, Dest: to}, nil, &fi)
}

// WriteFile replaces path with r's bytes, creating parent directories.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader) (sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	return fi, c.fsJSON(ctx, Request{Op: OpWriteFile, Path: path}, r, &fi)
}

// ReadFile writes path's bytes to w.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) error {
	return opErr(c.do(ctx, Request{Op: OpReadFile, Path: path}, &sandbox.Stdio{Stdout: w}))
}

// fsJSON runs a file system op and decodes its JSON reply into out.
func (c *Client) fsJSON(ctx context.Context, req Request, stdin io.Reader, out any) error {
	var buf bytes.Buffer
	stdio := &sandbox.Stdio{Stdout: &buf}
	// A stdin that fails aborts the op (frameStdinAbort), and the agent
	// answers once it has undone it; its error is the one to report.
	var in *errReader
	if stdin != nil {
		in = &errReader{r: stdin}
		stdio.Stdin = in
	}
	if err := opErr(c.do(ctx, req, stdio)); err != nil {
		if in != nil && in.err != nil {
			return fmt.Errorf("read upload: %w", in.err)
		}
		return err
	}
	if out == nil {
		return nil
	}
	return decodeJSON(buf.Bytes(), out)
}

// errReader remembers its reader's failure.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}
