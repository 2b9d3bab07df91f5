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
