package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"smolvm.dev/smolvm/api"
)

// stream writes a response as a sequence of JSON events: newline-delimited
// JSON by default, server-sent events when the client accepts
// text/event-stream. Headers go out with the first event, so a failure
// before any output is still an ordinary error response.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	sse     bool
	started bool
}

func newStream(w http.ResponseWriter, r *http.Request) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), sse: wantsSSE(r)}
}

func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// begin sends the headers, once.
func (s *stream) begin() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	if s.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-store")
	// Tell proxies not to buffer: a stream is only useful live.
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// send writes one event and flushes it; typ names it for SSE.
func (s *stream) send(typ string, v any) error {
	s.begin()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if s.sse {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", typ, b)
	} else {
		_, err = s.w.Write(append(b, '\n'))
	}
	if err != nil {
		return err
	}
	return s.rc.Flush()
}

// fail ends the stream with err: an error response if nothing was sent
// yet, an error event otherwise.
func (s *stream) fail(err error) {
	if !s.started {
		writeError(s.w, err)
		return
	}
	s.send("error", api.ExecEvent{Type: "error", Error: errorFor(err)})
}

// comment keeps an idle SSE connection open through proxies.
func (s *stream) comment() error {
	s.begin()
	if s.sse {
		if _, err := fmt.Fprint(s.w, ": keepalive\n\n"); err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

// output adapts one output stream ("stdout", "stderr") of an exec, or of
// a log when log is set, to events.
type output struct {
	s   *stream
	typ string
	log bool
}

func (o output) Write(p []byte) (int, error) {
	data, enc := api.EncodeData(p)
	var ev any = api.ExecEvent{Type: o.typ, Data: data, Encoding: enc}
	if o.log {
		ev = api.LogEvent{Stream: o.typ, Data: data, Encoding: enc}
	}
	if err := o.s.send(o.typ, ev); err != nil {
		return 0, err
	}
	return len(p), nil
}
