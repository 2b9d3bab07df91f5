package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"smolvm.dev/smolvm/api"
)

// DialPort connects to port inside sandbox ref through the server's
// tunnel (sandbox.Ports): the connection carries the port's bytes both
// ways. ctx bounds only the dial, as the runtime's DialPort.
func (c *Client) DialPort(ctx context.Context, ref string, port int) (net.Conn, error) {
	// The tunnel outlives the dial's ctx; the transport would close it
	// with the request's context, so that is ended by Close instead.
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	resp, err := c.do(tctx, request{method: http.MethodGet, path: sbPath(ref, "/tunnel/", strconv.Itoa(port)), upgrade: api.TunnelProtocol})
	if !stop() && err == nil {
		// ctx ended as the dial succeeded: the tunnel is closed.
		resp.Body.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("port %d of %s: the server answered %s, not a tunnel", port, ref, resp.Status)
	}
	return &tunnel{ReadWriteCloser: rwc, cancel: cancel, addr: tunnelAddr(ref + ":" + strconv.Itoa(port))}, nil
}

// tunnel is a port's byte stream through the server. It has no
// deadlines: the server's connection is the transport's own.
type tunnel struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
	addr   tunnelAddr
}

func (t *tunnel) Close() error {
	defer t.cancel()
	return t.ReadWriteCloser.Close()
}

func (t *tunnel) LocalAddr() net.Addr  { return t.addr }
func (t *tunnel) RemoteAddr() net.Addr { return t.addr }

func (t *tunnel) SetDeadline(time.Time) error      { return errNoDeadline }
func (t *tunnel) SetReadDeadline(time.Time) error  { return errNoDeadline }
func (t *tunnel) SetWriteDeadline(time.Time) error { return errNoDeadline }

var errNoDeadline = fmt.Errorf("a port tunnel: deadlines: %w", errors.ErrUnsupported)

// tunnelAddr names a tunnel's port: SANDBOX:PORT.
type tunnelAddr string

func (a tunnelAddr) Network() string { return api.TunnelProtocol }
func (a tunnelAddr) String() string  { return string(a) }
