package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testerrs"
)

// answer is what one E2B route answered.
type answer struct {
	status int
	body   map[string]any
}

func record(t *testing.T, write func(http.ResponseWriter)) answer {
	t.Helper()
	w := httptest.NewRecorder()
	write(w)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return answer{w.Code, body}
}

// answers sends err the three ways E2B answers errors: the control
// plane's {code: status, message}, an envd RPC's Connect error, and
// envd's /files route.
func answers(t *testing.T, err error) (api, rpc, files answer) {
	t.Helper()
	api = record(t, func(w http.ResponseWriter) { writeErr(w, err) })
	rpc = record(t, func(w http.ResponseWriter) {
		envdError(w, httptest.NewRequest("POST", "/filesystem.Filesystem/Stat", nil), err)
	})
	files = record(t, func(w http.ResponseWriter) { envdError(w, httptest.NewRequest("GET", "/files", nil), err) })
	return api, rpc, files
}

// TestErrorClasses walks every error class through E2B's table: the
// control plane's status, envd's Connect code (and the status Connect
// sends it with), and the status of envd's HTTP routes. A class the table
// lacks fails it.
func TestErrorClasses(t *testing.T) {
	want := map[error]struct {
		api        int
		code       string
		rpc, files int
	}{
		errdefs.ErrNotFound:      {404, "not_found", 404, 404},
		errdefs.ErrAlreadyExists: {409, "already_exists", 409, 409},
		errdefs.ErrInvalid:       {400, "invalid_argument", 400, 400},
		errdefs.ErrConflict:      {409, "unavailable", 503, 502},
		errdefs.ErrDenied:        {403, "permission_denied", 403, 403},
		errdefs.ErrQuota:         {429, "resource_exhausted", 429, 429},
		errdefs.ErrUnavailable:   {502, "unavailable", 503, 502},
		errdefs.ErrCorrupt:       {500, "data_loss", 500, 500},
		errdefs.ErrUnsupported:   {501, "unimplemented", 501, 501},
	}
	testerrs.Each(t, func(t *testing.T, class, err error) {
		w, ok := want[class]
		if _, mapped := classReplies[class]; !ok || !mapped {
			t.Fatal("no reply in E2B's table")
		}
		api, rpc, files := answers(t, err)
		if api.status != w.api || api.body["code"] != float64(w.api) || api.body["message"] != err.Error() {
			t.Errorf("control plane %+v, want %d", api, w.api)
		}
		if rpc.status != w.rpc || rpc.body["code"] != w.code || rpc.body["message"] != err.Error() {
			t.Errorf("envd RPC %+v, want %d %q", rpc, w.rpc, w.code)
		}
		if files.status != w.files || files.body["code"] != float64(w.files) || files.body["message"] != err.Error() {
			t.Errorf("envd /files %+v, want %d", files, w.files)
		}
	})
}

// TestErrorSpecialCases: errors of no class, a context that ended, and
// answers already in Connect's terms.
func TestErrorSpecialCases(t *testing.T) {
	for _, c := range []struct {
		err        error
		api        int
		code       string
		rpc, files int
	}{
		{errors.New("disk on fire"), 500, codeInternal, 500, 500},
		{fmt.Errorf("exec: %w", context.DeadlineExceeded), 504, codeDeadlineExceeded, 504, 504},
		{rpcErrorf(codeUnauthenticated, "bad token"), 401, codeUnauthenticated, 401, 401},
	} {
		api, rpc, files := answers(t, c.err)
		if api.status != c.api || rpc.status != c.rpc || rpc.body["code"] != c.code || files.status != c.files {
			t.Errorf("%v: %+v %+v %+v", c.err, api, rpc, files)
		}
	}
	missing := fsError("stat", "/x", fmt.Errorf("stat: %w", &sandbox.OpError{Exit: sandbox.Exit{Code: 1, Error: "stat /x: no such file", Kind: sandbox.KindNotFound}}))
	if missing.Code != codeNotFound || missing.Message != "stat /x: no such file or directory" {
		t.Errorf("a missing file: %+v", missing)
	}
}
