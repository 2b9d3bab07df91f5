package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/jsondup"
	"smolvm.dev/smolvm/sandbox"
)

// answer is a status and the code that goes with it.
type answer struct {
	status int
	code   string
}

// classAnswers is the API's answer to each error class.
var classAnswers = map[error]answer{
	errdefs.ErrNotFound:      {http.StatusNotFound, api.CodeNotFound},
	errdefs.ErrAlreadyExists: {http.StatusConflict, api.CodeConflict},
	errdefs.ErrInvalid:       {http.StatusBadRequest, api.CodeInvalid},
	errdefs.ErrConflict:      {http.StatusConflict, api.CodeConflict},
	errdefs.ErrDenied:        {http.StatusForbidden, api.CodeDenied},
	errdefs.ErrQuota:         {http.StatusConflict, api.CodeConflict},
	errdefs.ErrUnavailable:   {http.StatusServiceUnavailable, api.CodeUnavailable},
	errdefs.ErrCorrupt:       {http.StatusUnprocessableEntity, api.CodeCorrupt},
	errdefs.ErrUnsupported:   {http.StatusNotImplemented, api.CodeUnsupported},
}

// errorFor maps a Manager error to its response: by its class, except for
// the errors that carry data. The message is the error's own text, so the
// CLI prints the same line in both modes.
func errorFor(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	a, classed := classAnswers[errdefs.Class(err)]
	if !classed {
		a = answer{http.StatusInternalServerError, api.CodeInternal}
	}
	e := &api.Error{Status: a.status, Code: a.code, Message: err.Error(), Class: errdefs.Name(err)}
	var (
		ee *sandbox.ExpiredError
		se *sandbox.StartError
		pe *httpguard.ParamError
		qe *sandbox.QuotaError
	)
	switch {
	case httpguard.IsTooLarge(err):
		e.Status, e.Code = http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case httpguard.IsSlow(err):
		e.Status, e.Code = http.StatusRequestTimeout, api.CodeTimeout
	case errors.As(err, &pe):
		e.Status, e.Code, e.Field = http.StatusBadRequest, api.CodeInvalid, pe.Param
	case errors.As(err, &qe):
		e.Field = qe.Field
	case errors.As(err, &se):
		exit := se.Exit
		e.Status, e.Code, e.Exit = http.StatusUnprocessableEntity, api.CodeCannotStart, &exit
	case errors.As(err, &ee):
		at := ee.At
		e.Code, e.ExpiredAt = api.CodeExpired, &at
	case !classed && errors.Is(err, context.DeadlineExceeded):
		e.Status, e.Code = http.StatusGatewayTimeout, api.CodeTimeout
	}
	return e
}

func writeError(w http.ResponseWriter, err error) {
	e := errorFor(err)
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpguard.WriteJSON(w, status, v) }

// maxBody bounds JSON request bodies; uploads have their own limit.
const maxBody = 1 << 20

// decode reads one JSON object from r into v, strictly: unknown fields,
// keys given twice, wrong types, trailing data and oversized bodies are
// 400s that name the field at fault.
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
		return duplicates(body, v)
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

// duplicates refuses a body that gives a key twice (encoding/json would
// take the last), naming it.
func duplicates(body []byte, v any) error {
	err := jsondup.Check(body, v)
	var de *jsondup.Error
	if !errors.As(err, &de) {
		return nil // v decoded from body: there is nothing else to find
	}
	if de.Deep {
		return invalid("", "request body: "+de.Error())
	}
	return invalid(de.Path, fmt.Sprintf("field %q: given twice", de.Path))
}

func typeName(e *json.UnmarshalTypeError) string {
	switch e.Type {
	case nil:
		return "another type"
	case reflect.TypeFor[api.Duration]():
		return `a duration ("90s", "15m") or a number of seconds`
	case reflect.TypeFor[api.Bytes]():
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

func invalid(field, msg string) *api.Error {
	e := errorFor(errdefs.New(errdefs.ErrInvalid, msg))
	e.Field = field
	return e
}
