package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testerrs"
)

// respond answers err through writeError, as every handler does, and
// returns the status and the decoded body.
func respond(t *testing.T, err error) (int, api.Error) {
	t.Helper()
	w := httptest.NewRecorder()
	writeError(w, err)
	var e api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("error body %q (%s): %v", w.Body, w.Header().Get("Content-Type"), err)
	}
	return w.Code, e
}

// TestErrorClasses walks every error class through the API's table: the
// status, the code and the class in the body, with the error's own message.
// A class the table lacks fails it.
func TestErrorClasses(t *testing.T) {
	want := map[error]struct {
		status int
		code   string
	}{
		errdefs.ErrNotFound:      {404, api.CodeNotFound},
		errdefs.ErrAlreadyExists: {409, api.CodeConflict},
		errdefs.ErrInvalid:       {400, api.CodeInvalid},
		errdefs.ErrConflict:      {409, api.CodeConflict},
		errdefs.ErrDenied:        {403, api.CodeDenied},
		errdefs.ErrQuota:         {409, api.CodeConflict},
		errdefs.ErrUnavailable:   {503, api.CodeUnavailable},
		errdefs.ErrCorrupt:       {422, api.CodeCorrupt},
		errdefs.ErrUnsupported:   {501, api.CodeUnsupported},
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code, Class struct{ Enum []string }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	described := doc.Components.Schemas.Error.Properties
	testerrs.Each(t, func(t *testing.T, class, err error) {
		w, ok := want[class]
		if _, mapped := classAnswers[class]; !ok || !mapped {
			t.Fatal("no answer in the API's table")
		}
		name := errdefs.Name(class)
		status, e := respond(t, err)
		if status != w.status || e.Code != w.code || e.Class != name || e.Message != err.Error() {
			t.Errorf("%d %+v, want %d %q with class %q", status, e, w.status, w.code, name)
		}
		if !slices.Contains(described.Code.Enum, e.Code) || !slices.Contains(described.Class.Enum, name) {
			t.Errorf("code %q or class %q not in openapi.json", e.Code, name)
		}
	})
}

// TestErrorSpecialCases: errors that carry data answer with it; errors of
// no class are 500s (or 504 when a deadline passed).
func TestErrorSpecialCases(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	status, e := respond(t, fmt.Errorf("get: %w", &sandbox.ExpiredError{Name: "box", At: at, Reason: "ttl"}))
	if status != 404 || e.Code != api.CodeExpired || e.Class != "not_found" || e.ExpiredAt == nil || !e.ExpiredAt.Equal(at) {
		t.Errorf("expired: %d %+v", status, e)
	}
	status, e = respond(t, &sandbox.StartError{Exit: sandbox.Exit{Code: 127, Error: "nope: not found", Kind: sandbox.KindNotFound}})
	if status != 422 || e.Code != api.CodeCannotStart || e.Exit == nil || e.Exit.Code != 127 {
		t.Errorf("cannot start: %d %+v", status, e)
	}
	status, e = respond(t, fmt.Errorf("exec: %w", context.DeadlineExceeded))
	if status != 504 || e.Code != api.CodeTimeout || e.Class != "" {
		t.Errorf("deadline: %d %+v", status, e)
	}
	status, e = respond(t, errors.New("disk on fire"))
	if status != 500 || e.Code != api.CodeInternal || e.Class != "" || e.Message != "disk on fire" {
		t.Errorf("no class: %d %+v", status, e)
	}
	status, e = respond(t, invalid("name", "field \"name\": bad"))
	if status != 400 || e.Code != api.CodeInvalid || e.Class != "invalid" || e.Field != "name" {
		t.Errorf("a refused request: %d %+v", status, e)
	}
	status, e = respond(t, fileError(&sandbox.OpError{Exit: sandbox.Exit{Code: 1, Error: "stat /x: no such file", Kind: sandbox.KindNotFound}}))
	if status != 404 || e.Code != CodeNoSuchFile || e.Class != "not_found" {
		t.Errorf("a missing file: %d %+v", status, e)
	}
	if status, _ := respond(t, &api.Error{Status: http.StatusTooManyRequests, Code: api.CodeBusy, Message: "busy"}); status != 429 {
		t.Errorf("a ready answer is sent as is: %d", status)
	}
}
