package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/agent"
	"smolvm.dev/smolvm/image"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/policy"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/snapshot"
)

// Error codes in error bodies; clients branch on them, not on messages.
const (
	CodeInvalid      = "invalid"      // 400: a malformed request; Field names what
	CodeUnauthorized = "unauthorized" // 401
	CodeDenied       = "denied"       // 403: the sandbox's trust policy refused
	CodeNotFound     = "not_found"    // 404: never existed, or removed (the message says when)
	CodeExpired      = "expired"      // 404: expired; ExpiredAt says when
	CodeConflict     = "conflict"     // 409: wrong state, name in use
	CodeTooLarge     = "too_large"    // 413: the limit is in the message
	CodeMethod       = "method"       // 405: the Allow header lists the methods
	CodeBusy         = "busy"         // 429, 503: over the concurrency limit
	CodeTimeout      = "timeout"      // 504
	CodeInternal     = "internal"     // 500
	CodeCannotStart  = "cannot_start" // 422: the main command could not start; Exit says why
)

// Error is the JSON body of every error response.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"error"`
	// Field is the request field a 400 is about.
	Field string `json:"field,omitempty"`
	// ExpiredAt is when an expired sandbox expired.
	ExpiredAt *time.Time `json:"expired_at,omitempty"`
	// Exit is why a sandbox's main command could not start (127: not
	// found, 126: not executable).
	Exit *agent.Exit `json:"exit,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// errorFor maps a Manager error to its response. The message is the
// error's own text, so the CLI prints the same line in both modes.
func errorFor(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	e := &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
	var (
		ee *sandbox.ExpiredError
		se *sandbox.StartError
		pe *httpguard.ParamError
	)
	switch {
	case httpguard.IsTooLarge(err):
		e.Status, e.Code = http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.As(err, &pe):
		e.Status, e.Code, e.Field = http.StatusBadRequest, CodeInvalid, pe.Param
	case errors.As(err, &se):
		exit := se.Exit
		e.Status, e.Code, e.Exit = http.StatusUnprocessableEntity, CodeCannotStart, &exit
	case errors.As(err, &ee):
		at := ee.At
		e.Status, e.Code, e.ExpiredAt = http.StatusNotFound, CodeExpired, &at
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, image.ErrNotFound), errors.Is(err, snapshot.ErrNotFound),
		errors.Is(err, sandbox.ErrPoolNotFound):
		e.Status, e.Code = http.StatusNotFound, CodeNotFound
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, image.ErrInvalidRef), errors.Is(err, snapshot.ErrInvalidName):
		e.Status, e.Code = http.StatusBadRequest, CodeInvalid
	case errors.Is(err, sandbox.ErrNameInUse), errors.Is(err, sandbox.ErrState), errors.Is(err, sandbox.ErrNotRunning), errors.Is(err, sandbox.ErrOrphan),
		errors.Is(err, snapshot.ErrInUse), errors.Is(err, snapshot.ErrNameInUse), errors.Is(err, sandbox.ErrPoolBudget):
		e.Status, e.Code = http.StatusConflict, CodeConflict
	case errors.Is(err, sandbox.ErrUnsupported):
		e.Status, e.Code = http.StatusNotImplemented, "unsupported"
	case errors.Is(err, snapshot.ErrCorrupt):
		e.Status, e.Code = http.StatusUnprocessableEntity, "corrupt"
		e.Status, e.Code = http.StatusConflict, CodeConflict
	case errors.Is(err, policy.ErrDenied):
		e.Status, e.Code = http.StatusForbidden, CodeDenied
	case errors.Is(err, context.DeadlineExceeded):
		e.Status, e.Code = http.StatusGatewayTimeout, CodeTimeout
	}
	return e
}

func writeError(w http.ResponseWriter, err error) {
	e := errorFor(err)
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// maxBody bounds JSON request bodies; uploads have their own limit.
const maxBody = 1 << 20

// decode reads one JSON object from r into v, strictly: unknown fields,
// wrong types, trailing data and oversized bodies are 400s that name the
// field at fault.
func decode(r io.Reader, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return invalid("", "request body: "+err.Error())
	}
	// JSON is UTF-8; the decoder would quietly turn bad bytes into U+FFFD.
	if !utf8.Valid(body) {
		return invalid("", "request body: not valid UTF-8")
	}
	if string(bytes.TrimSpace(body)) == "null" {
		return invalid("", "request body: want a JSON object, not null")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		if dec.More() {
			return invalid("", "request body: unexpected data after the JSON object")
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return invalid("", "request body: unexpected data after the JSON object")
		}
		return nil
	}
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case errors.Is(err, io.EOF):
		return invalid("", "request body: empty; want a JSON object")
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return invalid("", fmt.Sprintf("request body: want a JSON object, not %s", typeErr.Value))
		}
		return invalid(field, fmt.Sprintf("field %q: want %s, got %s", field, typeName(typeErr), typeErr.Value))
	case errors.As(err, &syntaxErr):
		return invalid("", fmt.Sprintf("request body: malformed JSON at byte %d: %v", syntaxErr.Offset, err))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(field, fmt.Sprintf("field %q: unknown field", field))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "request body: truncated JSON")
	}
	return invalid("", "request body: "+err.Error())
}

func typeName(e *json.UnmarshalTypeError) string {
	switch e.Type {
	case nil:
		return "another type"
	case durationType:
		return `a duration ("90s", "15m") or a number of seconds`
	case bytesType:
		return `a size ("512m", "1g") or a number of bytes`
	}
	switch e.Type.Kind().String() {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	}
	return "a number"
}

func invalid(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field, Message: msg}
}
