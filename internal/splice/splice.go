// Package splice joins two byte streams, for whatever carries a port's
// connection whole: the guest agent's port dials and forwards, and the
// API server's tunnels to ports.
package splice

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Conns copies a (read through ar, which may hold bytes read ahead of a)
// to b and b to a until both directions end. A direction that ends
// cleanly half-closes its destination; one that fails closes both, which
// ends the other.
func Conns(a net.Conn, ar io.Reader, b net.Conn) {
	var wg sync.WaitGroup
	pipe := func(dst net.Conn, src io.Reader) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil || CloseWrite(dst) != nil {
			a.Close()
			b.Close()
		}
	}
	wg.Add(2)
	go pipe(b, ar)
	go pipe(a, b)
	wg.Wait()
}

// CloseWrite half-closes c, or fails if c cannot.
func CloseWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
