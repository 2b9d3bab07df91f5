package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// envd's Filesystem.WatchDir: a stream of changes under a directory, read
// by the sandbox's agent with inotify (sandbox.FS.Watch). It lasts until
// the client leaves, the call's timeout (the SDK's timeoutMs, 60 s by
// default) passes, or the directory goes away. A checkpoint or fork ends
// it too: the agent drops its host connections for them. A pause does not:
// it freezes the sandbox, connections and all.

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

func newFilesystemEvent(ev sandbox.WatchEvent) *filesystemEvent {
	return &filesystemEvent{Name: ev.Name, Type: eventTypes[ev.Op]}
}

// eventTypes names the agent's watch operations as envd's EventType.
var eventTypes = map[string]string{
	sandbox.WatchCreate: "EVENT_TYPE_CREATE",
	sandbox.WatchWrite:  "EVENT_TYPE_WRITE",
	sandbox.WatchRemove: "EVENT_TYPE_REMOVE",
	sandbox.WatchRename: "EVENT_TYPE_RENAME",
	sandbox.WatchChmod:  "EVENT_TYPE_CHMOD",
}

// watchSet holds the open watches of every sandbox: a count of each
// sandbox's, and the polled ones by ID.
type watchSet struct {
	mu     sync.Mutex
	n      map[string]int
	polled map[string]*polledWatch
}

func newWatchSet() *watchSet {
	return &watchSet{n: map[string]int{}, polled: map[string]*polledWatch{}}
}

// acquire takes one of sandboxID's watches, or says why it cannot.
func (ws *watchSet) acquire(sandboxID string) (release func(), rerr *rpcError) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n[sandboxID] >= maxWatches {
		return nil, rpcErrorf(codeResourceExhausted, "sandbox %q already has %d directory watches; stop one first", sandboxID, maxWatches)
	}
	ws.n[sandboxID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			if ws.n[sandboxID]--; ws.n[sandboxID] == 0 {
				delete(ws.n, sandboxID)
			}
		})
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
	fsys, err := h.m.FS(ctx, c.sb.ID)
	if err != nil {
		envdError(c.w, c.r, err)
		return
	}
	var st *stream
	kaCtx, stopKeepalive := context.WithCancel(ctx)
	var keepalives sync.WaitGroup
	err = fsys.Watch(ctx, req.Path, req.Recursive, func(ev sandbox.WatchEvent) error {
		if ev.Op == "" {
			st = newStream(c.w)
			keepalives.Add(1)
			go func() {
				defer keepalives.Done()
				keepalive(kaCtx, c.r, st, watchDirResponse{Keepalive: &struct{}{}})
			}()
			return st.Send(watchDirResponse{Start: &struct{}{}})
		}
		return st.Send(watchDirResponse{Filesystem: newFilesystemEvent(ev)})
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

// envd's polled watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher),
// which E2B's Python SDK uses for watch_dir: the same agent watch, its
// events kept for the caller to fetch, at most sandbox.MaxWatchQueue of
// them. A watcher that falls that far behind ends, and says so at its next
// fetch. One that ended is forgotten a minute after its end if nobody
// fetched it.

// polledWatch is one watcher made by CreateWatcher.
type polledWatch struct {
	sandboxID string
	cancel    context.CancelFunc

	mu     sync.Mutex
	events []filesystemEvent
	// end is why the watch ended (nil while it runs or after a clean end);
	// ended is set once it has.
	end   *rpcError
	ended bool
}

func (pw *polledWatch) add(ev sandbox.WatchEvent) error {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(pw.events) >= sandbox.MaxWatchQueue {
		return fmt.Errorf("watcher: more than %d events not fetched; events were lost", sandbox.MaxWatchQueue)
	}
	pw.events = append(pw.events, *newFilesystemEvent(ev))
	return nil
}

type createWatcherRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

type watcherRequest struct {
	WatcherID string `json:"watcherId"`
}

func (h *Handler) createWatcher(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	var req createWatcherRequest
	fsys, rerr := h.fsBegin(ctx, c, raw, &req, func() map[string]string { return map[string]string{"path": req.Path} })
	if rerr != nil {
		return nil, rerr
	}
	release, rerr := h.watches.acquire(c.sb.ID)
	if rerr != nil {
		return nil, rerr
	}
	// The watch outlives this call: it ends with the server, or when
	// removed.
	wctx, cancel := context.WithCancel(h.procs.ctx)
	pw := &polledWatch{sandboxID: c.sb.ID, cancel: cancel}
	started := make(chan error, 1)
	go func() {
		defer release()
		var ok bool
		err := fsys.Watch(wctx, req.Path, req.Recursive, func(ev sandbox.WatchEvent) error {
			if ev.Op == "" {
				ok = true
				started <- nil
				return nil
			}
			return pw.add(ev)
		})
		if !ok {
			started <- err
			cancel()
			return
		}
		pw.mu.Lock()
		pw.ended = true
		if err != nil && wctx.Err() == nil {
			pw.end = fsError("watch", req.Path, err)
		}
		pw.mu.Unlock()
		time.AfterFunc(time.Minute, func() { h.watches.forget(pw) })
	}()
	select {
	case err := <-started:
		if err != nil {
			return nil, fsError("watch", req.Path, err)
		}
	case <-ctx.Done():
		cancel()
		return nil, rpcFrom(ctx.Err())
	}
	id := newToken()
	h.watches.mu.Lock()
	h.watches.polled[id] = pw
	h.watches.mu.Unlock()
	return struct {
		WatcherID string `json:"watcherId"`
	}{id}, nil
}

// forget drops pw from the table, wherever it is.
func (ws *watchSet) forget(pw *polledWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, p := range ws.polled {
		if p == pw {
			delete(ws.polled, id)
		}
	}
}

// find returns sandboxID's watcher named by raw's watcherId.
func (ws *watchSet) find(sandboxID string, raw []byte) (string, *polledWatch, *rpcError) {
	var req watcherRequest
	if rerr := decodeMessage(raw, &req); rerr != nil {
		return "", nil, rerr
	}
	if req.WatcherID == "" {
		return "", nil, rpcErrorf(codeInvalidArgument, "watcherId: required")
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	pw, ok := ws.polled[req.WatcherID]
	if !ok || pw.sandboxID != sandboxID {
		return "", nil, rpcErrorf(codeNotFound, "watcher %q not found", req.WatcherID)
	}
	return req.WatcherID, pw, nil
}

func (h *Handler) getWatcherEvents(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	id, pw, rerr := h.watches.find(c.sb.ID, raw)
	if rerr != nil {
		return nil, rerr
	}
	pw.mu.Lock()
	events, end, ended := pw.events, pw.end, pw.ended
	pw.events = nil
	pw.mu.Unlock()
	if len(events) == 0 && ended {
		h.watches.mu.Lock()
		delete(h.watches.polled, id)
		h.watches.mu.Unlock()
		if end == nil {
			end = rpcErrorf(codeNotFound, "watcher %q has ended", id)
		}
		return nil, end
	}
	if events == nil {
		events = []filesystemEvent{}
	}
	return struct {
		Events []filesystemEvent `json:"events"`
	}{events}, nil
}

func (h *Handler) removeWatcher(ctx context.Context, c *envdCall, raw []byte) (any, *rpcError) {
	id, pw, rerr := h.watches.find(c.sb.ID, raw)
	if rerr != nil {
		return nil, rerr
	}
	pw.cancel()
	h.watches.mu.Lock()
	delete(h.watches.polled, id)
	h.watches.mu.Unlock()
	return struct{}{}, nil
}
