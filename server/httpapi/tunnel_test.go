package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/fakeruntime"
)

// echoPorts is the fake runtime whose sandboxes' every port is one echo
// server on loopback, for the tunnel.
type echoPorts struct {
	*fakeruntime.Runtime
	addr string
}

func (e echoPorts) DialPort(ctx context.Context, ref string, _ int) (net.Conn, error) {
	if _, err := e.Runtime.Get(ctx, ref); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", e.addr)
}

// TestTunnel dials a port through the server, as the cluster gateway's
// runtime does at a node: the bytes pass both ways, a sandbox that does
// not exist is not found, and a request that does not upgrade is refused.
func TestTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	rt := fakeruntime.New(t)
	f := serve(t, httpapi.Options{Manager: echoPorts{rt, ln.Addr().String()}, Images: rt.Images(), Snapshots: rt.Snapshots()}, nil)
	sb := f.create("tunnelled", "")
	ctx := context.Background()
	c, err := f.c.DialPort(ctx, sb.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the tunnel: %q %v", line, err)
	}
	if _, err := f.c.DialPort(ctx, "nosuch", 8080); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("tunnel to a sandbox that does not exist: %v", err)
	}
	if code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/tunnelled/tunnel/8080", ""); code != http.StatusBadRequest {
		t.Fatalf("tunnel without an upgrade: %d %s", code, body)
	}
}
