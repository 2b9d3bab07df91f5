// Package httpguard holds what every HTTP surface of smolvm serve (the
// native API, E2B's control plane and envd) checks before a handler runs:
// the request path, the names in path parameters, the size of the body
// and which API key the request carries (credentials.go).
// It also drains what an early answer left unread, so that a refused
// request gets its answer rather than a connection reset. Each surface
// writes the errors in its own shape.
package httpguard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/units"
)

// Path checks a request's path: every segment, as sent and decoded, is
// non-empty, not "." or "..", free of NUL bytes and valid UTF-8. The
// ServeMux would otherwise redirect "." and ".." away before any check,
// and an empty segment is an empty name.
func Path(r *http.Request) error { return checkPath(r, false) }

// ForwardedPath is Path for a request forwarded to a server in a sandbox,
// whose paths may have empty segments ("/static/", "a//b").
func ForwardedPath(r *http.Request) error { return checkPath(r, true) }

func checkPath(r *http.Request, empty bool) error {
	raw := r.URL.EscapedPath()
	if raw == "/" {
		return nil
	}
	if !strings.HasPrefix(raw, "/") {
		return fmt.Errorf("%w: path %s: must start with '/'", names.ErrInvalid, quote(raw))
	}
	for _, seg := range strings.Split(raw[1:], "/") {
		dec, err := url.PathUnescape(seg)
		why := ""
		switch {
		case err != nil:
			why = "a malformed %-escape"
		case dec == "" && !empty:
			why = "an empty segment"
		case dec == "." || dec == "..":
			why = fmt.Sprintf("a %q segment", dec)
		case strings.IndexByte(dec, 0) >= 0:
			why = "a NUL byte"
		case !utf8.ValidString(dec):
			why = "bytes that are not UTF-8"
		}
		if why != "" {
			return fmt.Errorf("%w: path %s: has %s", names.ErrInvalid, quote(raw), why)
		}
	}
	return nil
}

// quote repeats at most 100 bytes of a path in a message.
func quote(s string) string {
	if len(s) > 100 {
		return fmt.Sprintf("%q…", s[:100])
	}
	return fmt.Sprintf("%q", s)
}

// KindOf returns the kind of name a path wildcard holds: {id} a sandbox,
// {snapshot} and {template} a snapshot, {pool} a pool, {port} a port,
// {tenant} a tenant, {key} a tenant key's ID, {hash} and {build} a hex
// ID, {alias} a template name, {volume} a volume.
func KindOf(wildcard string) (names.Kind, bool) {
	switch wildcard {
	case "id":
		return names.Sandbox, true
	case "snapshot", "template":
		return names.Snapshot, true
	case "pool":
		return names.Pool, true
	case "port":
		return names.Port, true
	case "tenant":
		return names.Tenant, true
	case "key":
		return names.Key, true
	case "hash", "build":
		return names.Hex, true
	case "alias":
		return names.Template, true
	case "volume":
		return names.Volume, true
	}
	return 0, false
}

// Wildcards returns the names of a ServeMux pattern's wildcards.
func Wildcards(pattern string) []string {
	var out []string
	for rest := pattern; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return out
		}
		out = append(out, strings.TrimSuffix(rest[i+1:i+j], "..."))
		rest = rest[i+j+1:]
	}
}

// Known returns an error naming a wildcard of pattern that KindOf does not
// know: every route must say what its parameters are (checked when routes
// are registered).
func Known(pattern string) error {
	for _, w := range Wildcards(pattern) {
		if _, ok := KindOf(w); !ok {
			return fmt.Errorf("route %q: no name rule for {%s} (add it to httpguard.KindOf)", pattern, w)
		}
	}
	return nil
}

// ParamError is a path parameter that is not a valid name.
type ParamError struct {
	Param string
	Err   error
}

func (e *ParamError) Error() string { return e.Err.Error() }
func (e *ParamError) Unwrap() error { return e.Err }

// Params checks the values of pattern's wildcards in r (served by a
// ServeMux with that pattern) with names.Check; the error is a
// *ParamError matching names.ErrInvalid.
func Params(r *http.Request, pattern string) error {
	for _, w := range Wildcards(pattern) {
		k, ok := KindOf(w)
		if !ok {
			return &ParamError{Param: w, Err: fmt.Errorf("%w: no rule for path parameter {%s}", names.ErrInvalid, w)}
		}
		if err := names.Check(k, r.PathValue(w)); err != nil {
			return &ParamError{Param: w, Err: err}
		}
	}
	return nil
}

// TooLargeError is a request body over a route's limit.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request body over the limit of %s (%d bytes)", units.FormatBytes(e.Limit), e.Limit)
}

// Declared returns a *TooLargeError if r says its body is longer than
// limit: such a body is refused before a byte of it is read.
func Declared(r *http.Request, limit int64) error {
	if r.ContentLength > limit {
		return &TooLargeError{Limit: limit}
	}
	return nil
}

// Bodiless reports whether the method of pattern ("METHOD /path") takes
// no request body: GET, HEAD and DELETE, which no client sends one with.
func Bodiless(pattern string) bool {
	m, _, _ := strings.Cut(pattern, " ")
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodDelete
}

// NoBodyError is a body sent to a route that takes none.
type NoBodyError struct{ Route string }

func (e *NoBodyError) Error() string {
	return fmt.Sprintf("%s takes no request body; send none", e.Route)
}

// NoBody returns a *NoBodyError if r carries a body: a declared length,
// or a chunked one with a byte in it (an empty chunked body is none).
// route names the route in the message.
func NoBody(r *http.Request, route string) error {
	if r.ContentLength > 0 {
		return &NoBodyError{Route: route}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var one [1]byte
	n, err := io.ReadFull(r.Body, one[:])
	switch {
	case n > 0:
		return &NoBodyError{Route: route}
	case errors.Is(err, io.EOF):
		return nil
	}
	return fmt.Errorf("reading the request body: %w", err)
}

// Buffer reads r's whole body, up to limit bytes, and puts it back in
// memory, so that no handler reads past the limit. A longer body is a
// *TooLargeError (and stays unread, for Drain); a body that cannot be read
// is another error.
func Buffer(r *http.Request, limit int64) error {
	if err := Declared(r, limit); err != nil {
		return err
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	if int64(len(b)) > limit {
		return &TooLargeError{Limit: limit}
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// Bounds of Drain: a client sending more, or for longer, or pausing for
// longer than DrainIdle, may see the connection reset after its answer.
const (
	DrainMax  = 64 << 20
	DrainTime = 5 * time.Second
	DrainIdle = time.Second
)

// Drain reads and discards what is left of r's body, within DrainMax
// bytes and DrainTime, as long as bytes keep coming. Call it once the
// answer is written: net/http closes a connection with a large unread
// body, and a client still sending then gets a reset instead of the
// answer. (A client that waits for 100 Continue sends nothing once it has
// a final answer: Drain gives up after DrainIdle.) Upgraded connections
// are left alone. A body held to a Pace gets these bounds instead of its
// own, and if it is not all read by then, the connection's reads fail
// from then on: net/http would otherwise wait, unbounded, for up to
// 256 KB more of it before closing the connection. Go's own client hides
// the reset (it reads an answer that comes mid-body; curl after 100
// Continue and Python's http.client do not), so the hostile test sends
// large bodies on raw connections too.
func Drain(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Upgrade") != "" {
		return
	}
	paced, _ := r.Body.(*pacedBody)
	if paced != nil && paced.done.Load() {
		return
	}
	rc := http.NewResponseController(w)
	setDeadline := rc.SetReadDeadline
	if paced != nil {
		setDeadline = func(t time.Time) error { paced.drainUntil(t); return nil }
	}
	rc.Flush()
	end := time.Now().Add(DrainTime)
	buf := make([]byte, 32<<10)
	var err error
	for n := 0; n < DrainMax && err == nil; {
		deadline := time.Now().Add(DrainIdle)
		if deadline.After(end) {
			deadline = end
		}
		if setDeadline(deadline) != nil {
			return
		}
		var m int
		m, err = r.Body.Read(buf)
		n += m
	}
	if paced != nil && !errors.Is(err, io.EOF) {
		// Its answer said Connection: close (pacedWriter).
		rc.SetReadDeadline(time.Now())
		return
	}
	rc.SetReadDeadline(time.Time{})
}

// Refuse prepares w for an answer that leaves the body unread: reads may
// then go on after the answer (Drain), and the connection closes after it.
func Refuse(w http.ResponseWriter) {
	http.NewResponseController(w).EnableFullDuplex()
	w.Header().Set("Connection", "close")
}

// WriteJSON answers status with v as JSON, its length declared: the
// answer is complete once flushed, even while Drain still reads the
// request's body (chunked, its end would wait for Drain).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer: `+strings.ReplaceAll(err.Error(), `"`, `'`)+`"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// Fail writes an error with status and msg in one API's shape.
type Fail func(w http.ResponseWriter, status int, msg string)

// Routed reports whether mux has a route for r. If it has none it answers
// with fail: 405 with an Allow header for a known path and another method,
// 404 otherwise.
func Routed(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, fail Fail) bool {
	if _, p := mux.Handler(r); p != "" {
		return true
	}
	if allow := Allowed(mux, r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		fail(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.EscapedPath(), strings.Join(allow, ", ")))
		return false
	}
	fail(w, http.StatusNotFound, fmt.Sprintf("%s %s: no such route", r.Method, r.URL.EscapedPath()))
	return false
}

// RefuseBody answers err from Declared, Buffer or NoBody, or from reading
// a body held to a Pace, with fail: 413 over the limit, 408 too slow, 400
// for a body where none belongs or one that could not be read. The body
// is left unread or broken: Refuse first, so the connection closes after
// the answer.
func RefuseBody(w http.ResponseWriter, err error, fail Fail) {
	Refuse(w)
	switch {
	case IsTooLarge(err):
		fail(w, http.StatusRequestEntityTooLarge, err.Error())
	case IsSlow(err):
		fail(w, http.StatusRequestTimeout, err.Error())
	default:
		fail(w, http.StatusBadRequest, err.Error())
	}
}

// Allowed returns the methods mux serves r's path with, for a 405's Allow
// header; none means the path is unknown (404). A ServeMux answers 404,
// 405 and a 301 for "." and ".." segments (%2e%2e too) itself, before any
// auth in a handler wrapper: so the servers check credentials, then the
// path, then route themselves, telling 405 from 404 with this.
func Allowed(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	return slices.Clip(allow)
}

// IsTooLarge reports whether err is a body over its limit.
func IsTooLarge(err error) bool {
	var te *TooLargeError
	return errors.As(err, &te)
}
