package guest

import (
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestForward relays two connections at once to an upperServer, with half-closes passing through, then stops with its context;
// a target that refuses closes the client's connection.
func TestForward(t *testing.T) {
	target := upperServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, target.Addr().String()) }()

	ask := func(msg string) string {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	got := make(chan string, 2)
	go func() { got <- ask("first") }()
	go func() { got <- ask("second") }()
	a, b := <-got, <-got
	if !(a == "FIRST" && b == "SECOND" || a == "SECOND" && b == "FIRST") {
		t.Errorf("relayed answers %q, %q", a, b)
	}

	target.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); len(b) > 0 || os.IsTimeout(err) {
		t.Errorf("a connection to a refusing target: %q, %v; want it closed", b, err)
	}
	c.Close()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Forward after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Forward did not stop with its context")
	}
}
