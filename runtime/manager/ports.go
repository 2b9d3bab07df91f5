package manager

import (
	"context"
	"fmt"
	"net"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/network"
)

// DialPort connects to TCP port on a running sandbox's loopback, through
// its agent: it needs no network in the sandbox and no published port, so
// it reaches every sandbox, whatever its network policy. ctx bounds only
// the dial; the caller closes the connection. Nothing listening there is
// an error of class unavailable.
//
// It is not part of sandbox.Service: the Go client would need a tunnel of
// its own, and the servers, which proxy ports, hold a Manager.
func (m *Manager) DialPort(ctx context.Context, ref string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d: use a number from 1 to 65535", names.ErrInvalid, port)
	}
	r, err := m.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	err = m.withGuest(ctx, r, func() (err error) {
		c, err = r.be.Guest(&r.spec).DialPort(ctx, port)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: port %d: %w", r.Name, port, err)
	}
	return c, nil
}

// DialPublished connects to addr, a published port's host address, from
// the namespace where the network host binds published ports: this host's
// own, or a test world's (network.Host.NetNS).
func (m *Manager) DialPublished(ctx context.Context, nw, addr string) (net.Conn, error) {
	ns := ""
	if m.net != nil {
		ns = m.net.NetNS
	}
	var c net.Conn
	err := network.InNetNS(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, nw, addr)
		return err
	})
	return c, err
}
