package guest

import (
	"io"
	"net"
	"testing"
)

// TestMux carries two streams at once over one pipe, refuses streams
// while nothing listens, and closes streams both ways.
func TestMux(t *testing.T) {
	a, b := net.Pipe()
	host, vm := NewMux(a), NewMux(b)
	go host.Run()
	go vm.Run()

	refused, err := host.Dial()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := refused.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("a stream nothing listens for: %d, %v", n, err)
	}

	ln := vm.Listen()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	s1, _ := host.Dial()
	s2, _ := host.Dial()
	big := make([]byte, 3*muxFrame+7)
	for i := range big {
		big[i] = byte(i)
	}
	go s1.Write(big)
	s2.Write([]byte("two"))
	got2 := make([]byte, 3)
	if _, err := io.ReadFull(s2, got2); err != nil || string(got2) != "two" {
		t.Fatalf("stream 2: %q, %v", got2, err)
	}
	got1 := make([]byte, len(big))
	if _, err := io.ReadFull(s1, got1); err != nil || string(got1) != string(big) {
		t.Fatalf("stream 1: %d bytes, %v", len(got1), err)
	}
	// The echo server closes its side once ours is closed.
	s2.Close()
	if _, err := s2.Write([]byte("x")); err == nil {
		t.Fatal("write after close succeeded")
	}
	ln.Close()
	if _, err := ln.Accept(); err == nil {
		t.Fatal("accept after close succeeded")
	}
	// The port breaking ends every stream.
	a.Close()
	if _, err := io.ReadAll(s1); err != nil {
		t.Fatalf("read after the port broke: %v", err)
	}
}
