package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"smolvm.dev/smolvm/internal/splice"
)

// Forward relays every connection accepted on ln to target until ctx
// ends (`smolvm-guest forward LISTEN TARGET`). A browser sandbox needs
// one: headless Chromium's DevTools listens on loopback only, which a
// published port (the sandbox's own address) cannot reach. It is Go
// rather than a script because the relay is on the path of a browser's
// first answer after a restore: a Python relay started two threads per
// connection, each a clone under gVisor.
func Forward(ctx context.Context, ln net.Listener, target string) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return ctx.Err()
			}
			// Out of descriptors, say: the listener is fine, try again.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			t, err := net.DialTimeout("tcp", target, portDialTimeout)
			if err != nil {
				return // the client sees the close, as it would a refusal
			}
			defer t.Close()
			splice.Conns(c, c, t)
		}()
	}
}

// ForwardMain is `smolvm-guest forward LISTEN TARGET`.
func ForwardMain(listen, target string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	return Forward(context.Background(), ln, target)
}
