package browser

import (
	"context"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// WaitCDP waits for a sandbox's DevTools endpoint and returns its
// WebSocket URL: the benchmark's cold start uses it.
func WaitCDP(ctx context.Context, svc sandbox.Service, id string, timeout time.Duration, dial Dialer) (string, error) {
	ep, err := endpoint(ctx, svc, id, timeout, dial)
	return ep.ws, err
}

// RoundTrips opens a CDP connection to cdpURL and times n
// Browser.getVersion calls on it: the WebSocket path's own latency (the
// published port, the relay, Chromium's DevTools thread), with no page
// work.
func RoundTrips(ctx context.Context, cdpURL string, dial Dialer, n int) (open time.Duration, rtt []time.Duration, err error) {
	t := time.Now()
	c, err := dialCDP(ctx, cdpURL, dialOptions(dial))
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	open = time.Since(t)
	for range n {
		t = time.Now()
		if err := c.call(ctx, "", "Browser.getVersion", nil, nil); err != nil {
			return open, rtt, err
		}
		rtt = append(rtt, time.Since(t))
	}
	return open, rtt, nil
}
