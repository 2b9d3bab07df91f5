package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/testerrs"
	"smolvm.dev/smolvm/workflow/trust"
)

// TestClientErrorClasses: an error of every class, answered by the server's
// writeError, reaches a Go client as an error of the same class with the
// same message, and of no other class.
func TestClientErrorClasses(t *testing.T) {
	var sent error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { httpapi.WriteError(w, sent) }))
	defer srv.Close()
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	testerrs.Each(t, func(t *testing.T, class, sentErr error) {
		sent = sentErr
		_, err := c.Get(t.Context(), "box")
		if !errors.Is(err, class) || errdefs.Class(err) != class || err.Error() != sent.Error() {
			t.Errorf("the client got %v, of class %q", err, errdefs.Name(err))
		}
		for _, other := range errdefs.Classes() {
			if other != class && errors.Is(err, other) {
				t.Errorf("also matches %q", errdefs.Name(other))
			}
		}
	})
}

// TestErrorClassesEndToEnd drives errors of four classes out of a real
// server (real Manager, real runsc): each answers with its status, code
// and class, and the Go client matches both the class and the sentinel a
// direct caller of the Manager would.
func TestErrorClassesEndToEnd(t *testing.T) {
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, ".smolvm"), 0o755)
	if err := os.WriteFile(filepath.Join(repo, trust.FileName), []byte("default = \"allow\"\n[run]\ndeny = [\"rm\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, nil)
	f.create("guarded", `,"policy":"`+repo+`"`)
	f.create("idle", `,"start":false`)

	ctx := context.Background()
	rm := sandbox.Process{Args: []string{"rm", "-rf", "/tmp"}}
	for _, c := range []struct {
		what         string
		method, path string
		body         string
		status       int
		code         string
		class        error
		sentinel     error
		viaClient    func() error
	}{
		{"no such sandbox", "GET", "/v1/sandboxes/ghost", "", 404, api.CodeNotFound, errdefs.ErrNotFound, sandbox.ErrNotFound,
			func() error { _, err := f.c.Get(ctx, "ghost"); return err }},
		{"a bad name", "POST", "/v1/sandboxes", `{"name":"bad name"}`, 400, api.CodeInvalid, errdefs.ErrInvalid, sandbox.ErrInvalid,
			func() error { _, err := f.c.Create(ctx, sandbox.CreateOptions{Name: "bad name"}); return err }},
		{"a name in use", "POST", "/v1/sandboxes", `{"name":"idle","start":false}`, 409, api.CodeConflict, errdefs.ErrAlreadyExists, nil,
			func() error { _, err := f.c.Create(ctx, sandbox.CreateOptions{Name: "idle"}); return err }},
		{"exec in a sandbox not running", "POST", "/v1/sandboxes/idle/exec", `{"args":["true"]}`, 409, api.CodeConflict, errdefs.ErrConflict, sandbox.ErrState,
			func() error {
				_, err := f.c.Exec(ctx, "idle", sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{})
				return err
			}},
		{"a command the policy denies", "POST", "/v1/sandboxes/guarded/exec", `{"args":["rm","-rf","/tmp"]}`, 403, api.CodeDenied, errdefs.ErrDenied, nil,
			func() error { _, err := f.c.Exec(ctx, "guarded", rm, sandbox.Stdio{}); return err }},
	} {
		status, body, _ := f.do(c.method, c.path, c.body)
		e := apiError(t, body)
		if status != c.status || e.Code != c.code || e.Class != errdefs.Name(c.class) {
			t.Errorf("%s: %d %s, want %d %q of class %q", c.what, status, body, c.status, c.code, errdefs.Name(c.class))
		}
		err := c.viaClient()
		if !errors.Is(err, c.class) || (c.sentinel != nil && !errors.Is(err, c.sentinel)) || err.Error() != e.Message {
			t.Errorf("%s: the client got %v (class %q), want %q and %v", c.what, err, errdefs.Name(err), errdefs.Name(c.class), c.sentinel)
		}
	}
}
