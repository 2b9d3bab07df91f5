package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// Reaching a port inside the sandbox goes through the agent, not through
// the sandbox's network: most sandboxes have none (--net none), and a
// published host port would be one more thing to allocate, guard and
// clean up. The agent dials the port on the sandbox's own loopback and,
// once that succeeds, answers with one frameOpen and steps aside: from
// then on the host connection carries the port's bytes both ways, raw.
// Raw rather than framed, because a proxied connection is all payload
// (framing would cost a copy and an allocation per chunk for nothing), and
// because the host connection is already a stream of its own, which is
// all any transport (a Unix socket under gVisor, vsock under a VM) gives.
// Half-closes pass through with CloseWrite where both ends support it.

// portDialTimeout bounds the agent's dial of a port on its loopback, which
// either answers at once or not at all.
const portDialTimeout = 5 * time.Second

// dialPort connects to port on the sandbox's loopback (IPv4, then IPv6)
// and splices it to the host connection nc until both directions end.
func (s *Server) dialPort(nc net.Conn, c *conn, port int) {
	if port < 1 || port > 65535 {
		c.writeJSON(frameExit, sandbox.Exit{Code: 125, Error: fmt.Sprintf("dial: port %d: use a number from 1 to 65535", port), Kind: sandbox.KindInvalid})
		return
	}
	var d net.Dialer
	d.Timeout = portDialTimeout
	t, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if t6, err6 := d.Dial("tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			t, err = t6, nil
		}
	}
	if err != nil {
		kind := sandbox.KindIO
		if errors.Is(err, syscall.ECONNREFUSED) {
			kind = sandbox.KindRefused
		}
		c.writeJSON(frameExit, sandbox.Exit{Code: 1, Error: fmt.Sprintf("nothing answers on port %d inside the sandbox: %v", port, err), Kind: kind})
		return
	}
	defer t.Close()
	if c.write(frameOpen, nil) != nil {
		return
	}
	// c.r may hold bytes the host sent right after its request.
	splice(nc, c.r, t)
}

// splice copies a (read through ar) to b and b to a until both directions
// end. A direction that ends cleanly half-closes its destination; one that
// fails closes both, which ends the other.
func splice(a net.Conn, ar io.Reader, b net.Conn) {
	var wg sync.WaitGroup
	pipe := func(dst net.Conn, src io.Reader) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil || closeWrite(dst) != nil {
			a.Close()
			b.Close()
		}
	}
	wg.Add(2)
	go pipe(b, ar)
	go pipe(a, b)
	wg.Wait()
}

// closeWrite half-closes c, or fails if c cannot.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// DialPort connects to TCP port on the sandbox's loopback through the
// agent. The connection is the port's byte stream; ctx bounds only the
// dial. Nothing listening is an *sandbox.OpError of kind sandbox.KindRefused
// (class unavailable).
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotListening, err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	pc, err := openPort(nc, port)
	if !stop() && err == nil {
		err = ctx.Err() // cancelled as the dial succeeded: nc is closed
	}
	if err != nil {
		nc.Close()
		var oe *sandbox.OpError
		if ctx.Err() != nil && !errors.As(err, &oe) {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return pc, nil
}

// openPort asks the agent on nc for port and reads its answer.
func openPort(nc net.Conn, port int) (net.Conn, error) {
	// A small buffer: after frameOpen the agent's bytes are the port's,
	// and portConn hands whatever was read ahead to the caller first.
	cn := &conn{r: bufio.NewReaderSize(nc, 512), w: nc}
	if err := cn.writeJSON(frameRequest, Request{Op: OpDial, Port: port}); err != nil {
		return nil, fmt.Errorf("%w: dial port %d: %v", ErrUnavailable, port, err)
	}
	typ, b, err := cn.read()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: dial port %d: %v", ErrUnavailable, port, err)
	case typ == frameOpen:
		return &portConn{Conn: nc, r: cn.r}, nil
	case typ == frameExit:
		var e sandbox.Exit
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%w: bad exit frame: %v", ErrUnavailable, err)
		}
		return nil, &sandbox.OpError{Exit: e}
	}
	return nil, fmt.Errorf("%w: dial port %d: unexpected frame %q", ErrUnavailable, port, typ)
}

// portConn is an agent connection turned into a port's byte stream; it
// first returns what was read ahead with the agent's answer.
type portConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *portConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// CloseWrite half-closes the stream; the agent passes it on to the port.
func (p *portConn) CloseWrite() error { return closeWrite(p.Conn) }
