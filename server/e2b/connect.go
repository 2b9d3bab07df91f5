package e2b

// The envd services speak the Connect protocol. The e2b SDK builds its
// transport with useBinaryFormat: false, so every message is protobuf's
// canonical JSON: unary calls are plain application/json bodies, and
// server-streaming calls (Process.Start, Process.Connect) are
// application/connect+json with each message in a 5-byte envelope (a flags
// byte, a big-endian length) and a final end-of-stream envelope that
// carries an error, if any. Speaking JSON means no protobuf code
// generation and no runtime dependency: the messages are the Go structs in
// envd.go, with protobuf's JSON field names.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/jsondup"
)

// Connect error codes, as they appear on the wire.
const (
	codeInvalidArgument   = "invalid_argument"
	codeNotFound          = "not_found"
	codeAlreadyExists     = "already_exists"
	codePermissionDenied  = "permission_denied"
	codeResourceExhausted = "resource_exhausted"
	codeUnauthenticated   = "unauthenticated"
	codeUnavailable       = "unavailable"
	codeUnimplemented     = "unimplemented"
	codeDeadlineExceeded  = "deadline_exceeded"
	codeDataLoss          = "data_loss"
	codeInternal          = "internal"
	codeFailedPrecond     = "failed_precondition"
)

// rpcError is a Connect error. The SDK maps codes to its error classes:
// not_found to NotFoundError (FileNotFoundError for files), invalid_argument
// to InvalidArgumentError, unauthenticated to AuthenticationError. The code
// is a string: E2B's numeric {"code": 404} is the control plane's and
// /files' shape only, and connect-web reads a bare HTTP 404 as
// unimplemented. protobuf-es refuses unknown JSON fields, so envd's replies
// carry no field the protocol lacks.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErrorf(code, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus is the status a unary error is sent with, per the Connect
// protocol's table.
func (e *rpcError) httpStatus() int {
	switch e.Code {
	case codeInvalidArgument, codeFailedPrecond:
		return http.StatusBadRequest
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeResourceExhausted:
		return http.StatusTooManyRequests
	case codeUnauthenticated:
		return http.StatusUnauthorized
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// fileStatus is the status envd's HTTP routes (/files, /health) answer
// with: Connect's, except that an unreachable sandbox is 502, as E2B's
// proxy answers, which the SDK reads as "not running".
func (e *rpcError) fileStatus() int {
	if e.Code == codeUnavailable {
		return http.StatusBadGateway
	}
	return e.httpStatus()
}

// maxRequest bounds a Connect request message; envd requests are small
// (a command line, a path, a stdin chunk).
const maxRequest = 4 << 20

// readUnary decodes a unary request body into v.
func readUnary(r *http.Request, v any) *rpcError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil {
		return rpcErrorf(codeInvalidArgument, "read request: %v", err)
	}
	if len(body) > maxRequest {
		return rpcErrorf(codeInvalidArgument, "request larger than %d bytes", maxRequest)
	}
	return decodeMessage(body, v)
}

// readEnveloped decodes the single enveloped request message of a
// server-streaming call into v.
func readEnveloped(r *http.Request, v any) *rpcError {
	var hdr [5]byte
	if _, err := io.ReadFull(r.Body, hdr[:]); err != nil {
		return rpcErrorf(codeInvalidArgument, "read request envelope: %v", err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if hdr[0]&flagCompressed != 0 {
		return rpcErrorf(codeInvalidArgument, "compressed requests are not supported")
	}
	if n > maxRequest {
		return rpcErrorf(codeInvalidArgument, "request larger than %d bytes", maxRequest)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return rpcErrorf(codeInvalidArgument, "read request: %v", err)
	}
	return decodeMessage(body, v)
}

func decodeMessage(body []byte, v any) *rpcError {
	if len(body) == 0 {
		body = []byte("{}")
	}
	if !utf8.Valid(body) {
		return rpcErrorf(codeInvalidArgument, "malformed request: not valid UTF-8")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return rpcErrorf(codeInvalidArgument, "malformed request: %s", describeJSONError(err))
	}
	if err := jsondup.Check(body, v); err != nil {
		return rpcErrorf(codeInvalidArgument, "malformed request: %v", err)
	}
	return nil
}

// describeJSONError names the field a decoding error is about.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q: expected %s, got %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}

// writeUnary sends a unary response or error.
func writeUnary(w http.ResponseWriter, v any, rerr *rpcError) {
	if rerr != nil {
		writeRPCError(w, rerr.httpStatus(), rerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// writeRPCError sends a Connect error with status.
func writeRPCError(w http.ResponseWriter, status int, rerr *rpcError) {
	httpguard.WriteJSON(w, status, rerr)
}

const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// stream is the server side of a server-streaming Connect call. Send is
// safe for concurrent use (data pumps and keepalives share it).
type stream struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	return &stream{w: w, rc: http.NewResponseController(w)}
}

// Send writes one message and flushes it to the client at once: output
// must reach the SDK's callbacks as it is produced.
func (s *stream) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.envelope(0, b)
}

// End closes the stream with rerr (nil for success).
func (s *stream) End(rerr *rpcError) error {
	end := struct {
		Error *rpcError `json:"error,omitempty"`
	}{rerr}
	b, _ := json.Marshal(end)
	return s.envelope(flagEndStream, b)
}

func (s *stream) envelope(flags byte, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	buf := make([]byte, 5, 5+len(b))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:], uint32(len(b)))
	buf = append(buf, b...)
	if _, err := s.w.Write(buf); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	return s.err
}

// keepaliveInterval is how often a stream sends a keepalive message, so a
// quiet stream keeps its connection: what the SDK asks for in its
// Keepalive-Ping-Interval header (seconds), 50 s without.
func keepaliveInterval(r *http.Request) time.Duration {
	if s, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 50 * time.Second
}

// isStreaming reports whether r is a streaming Connect call. Its errors
// must travel in the stream's end message, with status 200: a Connect
// client reads no body from any other status of a stream, only a code
// guessed from the status ("HTTP 404" is unimplemented).
func isStreaming(r *http.Request) bool {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/connect+")
}

// connectTimeout reads the Connect-Timeout-Ms header: the deadline the
// client gave the call (0: none).
func connectTimeout(r *http.Request) (time.Duration, *rpcError) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, rpcErrorf(codeInvalidArgument, "header Connect-Timeout-Ms: %q is not a non-negative integer", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
