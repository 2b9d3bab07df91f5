package guest

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// TestDialPort splices a port to the client both ways, half-closes
// included: the server sees the client's EOF, and answers after it.
func TestDialPort(t *testing.T) {
	c, _ := startAgent(t, nil)
	ln := upperServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := ln.Addr().(*net.TCPAddr).Port
	for i := range 3 {
		pc, err := c.DialPort(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		msg := strings.Repeat("hello port ", 10000*(i+1))
		if _, err := pc.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := pc.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(pc)
		pc.Close()
		if err != nil || string(got) != strings.ToUpper(msg) {
			t.Fatalf("dial %d: got %d bytes (%v), want %d", i, len(got), err, len(msg))
		}
	}
}

func TestDialPortRefused(t *testing.T) {
	c, _ := startAgent(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx := context.Background()
	_, err = c.DialPort(ctx, port)
	if !errors.Is(err, errdefs.ErrUnavailable) || sandbox.ErrorKind(err) != sandbox.KindRefused || !strings.Contains(err.Error(), "nothing answers on port") {
		t.Fatalf("closed port: %v (kind %q)", err, sandbox.ErrorKind(err))
	}
	_, err = c.DialPort(ctx, 70000)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("port 70000: %v", err)
	}
}

// upperServer serves on loopback until the test ends: each connection's
// bytes, read until the client's half-close, are sent back upper-cased.
func upperServer(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				b, _ := io.ReadAll(s)
				s.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return ln
}
