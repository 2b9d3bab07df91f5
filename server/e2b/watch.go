package e2b

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"smolvm.dev/smolvm/runtime/guest"
)

// envd's Filesystem.WatchDir: a stream of changes under a directory, read
// by the sandbox's agent with inotify (guest.Client.Watch). It lasts until
// the client leaves, the call's timeout (the SDK's timeoutMs, 60 s by
// default) passes, or the directory goes away. A pause or checkpoint ends
// it too: the agent drops its host connections for them.

// maxWatches bounds the watches open at once on one sandbox; each holds an
// agent connection and an inotify instance in the sandbox.
const maxWatches = 32

type watchDirRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	// includeEntry and allowNetworkMounts need envd 0.6.3 and 0.6.4: the
	// SDK does not send them to the version reported here.
	IncludeEntry       bool `json:"includeEntry"`
	AllowNetworkMounts bool `json:"allowNetworkMounts"`
}

type watchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

type filesystemEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// eventTypes names the agent's watch operations as envd's EventType.
var eventTypes = map[string]string{
	guest.WatchCreate: "EVENT_TYPE_CREATE",
	guest.WatchWrite:  "EVENT_TYPE_WRITE",
	guest.WatchRemove: "EVENT_TYPE_REMOVE",
	guest.WatchRename: "EVENT_TYPE_RENAME",
	guest.WatchChmod:  "EVENT_TYPE_CHMOD",
}

// watchCounts counts the open watches of each sandbox.
type watchCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of sandboxID's watches, or says why it cannot.
func (wc *watchCounts) acquire(sandboxID string) (release func(), rerr *rpcError) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.n[sandboxID] >= maxWatches {
		return nil, rpcErrorf(codeResourceExhausted, "sandbox %q already has %d directory watches; stop one first", sandboxID, maxWatches)
	}
	wc.n[sandboxID]++
	return func() {
		wc.mu.Lock()
		defer wc.mu.Unlock()
		if wc.n[sandboxID]--; wc.n[sandboxID] == 0 {
			delete(wc.n, sandboxID)
		}
	}, nil
}

func (h *Handler) watchDir(c *envdCall) {
	var req watchDirRequest
	if rerr := readEnveloped(c.r, &req); rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	if err := checkPath("path", req.Path); err != nil {
		envdError(c.w, c.r, rpcErrorf(codeInvalidArgument, "%v", err))
		return
	}
	timeout, rerr := connectTimeout(c.r)
	if rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	release, rerr := h.watches.acquire(c.sb.ID)
	if rerr != nil {
		envdError(c.w, c.r, rerr)
		return
	}
	defer release()
	ctx := c.r.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ac, err := h.m.Agent(ctx, c.sb.ID)
	if err != nil {
		envdError(c.w, c.r, err)
		return
	}
	var st *stream
	kaCtx, stopKeepalive := context.WithCancel(ctx)
	var keepalives sync.WaitGroup
	err = ac.Watch(ctx, req.Path, req.Recursive, func(ev guest.WatchEvent) error {
		if ev.Op == "" {
			st = newStream(c.w)
			keepalives.Add(1)
			go func() {
				defer keepalives.Done()
				keepalive(kaCtx, c.r, st, watchDirResponse{Keepalive: &struct{}{}})
			}()
			return st.Send(watchDirResponse{Start: &struct{}{}})
		}
		return st.Send(watchDirResponse{Filesystem: &filesystemEvent{Name: ev.Name, Type: eventTypes[ev.Op]}})
	})
	stopKeepalive()
	keepalives.Wait() // nothing may write once the handler returns
	switch {
	case c.r.Context().Err() != nil:
		return // the client left
	case st == nil:
		envdError(c.w, c.r, fsError("watch", req.Path, err))
	case errors.Is(err, context.DeadlineExceeded):
		st.End(rpcErrorf(codeDeadlineExceeded, "watch %s: the call's timeout passed", req.Path))
	case err != nil:
		st.End(fsError("watch", req.Path, err))
	default:
		st.End(nil)
	}
}

// keepalive sends msg at keepaliveInterval until ctx ends.
func keepalive(ctx context.Context, r *http.Request, st *stream, msg any) {
	tick := time.NewTicker(keepaliveInterval(r))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if st.Send(msg) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
