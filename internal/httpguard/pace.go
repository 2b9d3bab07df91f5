package httpguard

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"smolvm.dev/smolvm/internal/units"
)

// Pace is how fast a request body must arrive: whole within Timeout plus
// one second for every MinRate bytes, however long it is. Slow headers
// are http.Server's ReadHeaderTimeout; this is the rest of the request. A
// body read past its deadline fails with a *SlowBodyError.
//
// One rule serves every route: a JSON body (at most 1 MiB) has at most
// Timeout + 64 s at the defaults, an upload of 1 GiB over 18 hours, and a
// trickle of 2 bytes a second is cut after Timeout whatever the route.
// Streams that must idle (a terminal's stdin) are WebSockets, which carry
// no body and are not paced.
type Pace struct {
	Timeout time.Duration
	MinRate int64 // bytes per second
}

// Defaults of smolvm serve's --body-timeout and --min-body-rate.
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultMinBodyRate = 16 << 10
)

// Hold holds r's body to p from now, and returns w and r to serve
// with: r's body moves the connection's read deadline on as it arrives,
// and w makes an answer given before the body has all arrived close the
// connection (Refuse), so that net/http does not wait for the rest of
// the body before sending it. A request without a body, or an upgrade
// (a WebSocket), is returned as it is.
func (p Pace) Hold(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Upgrade") != "" {
		return w, r
	}
	b := &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), p: p, start: time.Now()}
	// Set before anything reads: net/http itself may read the body
	// (the rest of it, up to 256 KB, before an early answer's headers).
	b.rc.SetReadDeadline(b.deadline())
	r = r.WithContext(r.Context())
	r.Body = b
	return &pacedWriter{ResponseWriter: w, body: b}, r
}

// pacedBody is a request body held to a Pace. Reads come from one
// goroutine at a time; whether the body is done is read from others.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	p     Pace
	start time.Time
	n     int64
	done  atomic.Bool // read to its end
	mu    sync.Mutex
	until time.Time // set by Drain: its deadline instead
}

func (b *pacedBody) deadline() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.until.IsZero() {
		return b.until
	}
	if b.p.Timeout <= 0 {
		return time.Time{}
	}
	return b.start.Add(b.p.Timeout + time.Duration(float64(b.n)/float64(max(b.p.MinRate, 1))*float64(time.Second)))
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, io.EOF
	}
	// net/http clears the deadline itself when the body ends (for its
	// background read, which cancels the request on an error): set it
	// before each read, never after the last.
	b.rc.SetReadDeadline(b.deadline())
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		b.done.Store(true)
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &SlowBodyError{Got: b.n, After: time.Since(b.start).Round(time.Second), Pace: b.p}
	}
	return n, err
}

// drainUntil makes t the deadline of every read from now on.
func (b *pacedBody) drainUntil(t time.Time) {
	b.mu.Lock()
	b.until = t
	b.mu.Unlock()
}

// pacedWriter closes the connection after an answer given before its
// request's body was all read.
type pacedWriter struct {
	http.ResponseWriter
	body     *pacedBody
	answered bool
}

func (w *pacedWriter) answer() {
	if !w.answered && !w.body.done.Load() {
		Refuse(w.ResponseWriter)
	}
	w.answered = true
}

func (w *pacedWriter) WriteHeader(code int) {
	w.answer()
	w.ResponseWriter.WriteHeader(code)
}

func (w *pacedWriter) Write(p []byte) (int, error) {
	w.answer()
	return w.ResponseWriter.Write(p)
}

func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// SlowBodyError is a request body that did not arrive at its Pace.
type SlowBodyError struct {
	Got   int64
	After time.Duration
	Pace  Pace
}

func (e *SlowBodyError) Error() string {
	return fmt.Sprintf("request body too slow: %d bytes in %s; a body must arrive within %s plus 1s per %s (smolvm serve --body-timeout, --min-body-rate)",
		e.Got, e.After, e.Pace.Timeout, units.FormatBytes(e.Pace.MinRate))
}

// IsSlow reports whether err is a body that came too slowly.
func IsSlow(err error) bool {
	var se *SlowBodyError
	return errors.As(err, &se)
}
