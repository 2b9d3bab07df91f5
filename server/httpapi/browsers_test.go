package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/browser"
)

// TestReleaseOnlyBrowsers: DELETE /v1/browsers/{id} answers a plain
// sandbox, by ID or name, as a missing browser (404) and leaves it
// running; a sandbox carrying the browser label, as every copy of a
// golden does, is released. (TestBrowser releases real Chromium ones.)
func TestReleaseOnlyBrowsers(t *testing.T) {
	f := newFakeFixture(t, nil)
	ctx := context.Background()
	plain := f.create("plain", "")
	for _, ref := range []string{plain.ID, plain.Name, "never-made"} {
		code, body, _ := f.do(http.MethodDelete, "/v1/browsers/"+ref, "")
		if code != http.StatusNotFound || apiError(t, body).Code != api.CodeNotFound {
			t.Errorf("DELETE /v1/browsers/%s: %d %s, want 404 not_found", ref, code, body)
		}
	}
	if sb, err := f.c.Get(ctx, plain.ID); err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("the plain sandbox after the browser deletes: %+v, %v", sb, err)
	}

	b := f.create("labelled", `,"labels":{"`+browser.Label+`":"browser"}`)
	if code, body, _ := f.do(http.MethodDelete, "/v1/browsers/"+b.ID, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE /v1/browsers/%s (a browser): %d %s", b.ID, code, body)
	}
	if _, err := f.c.Get(ctx, b.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the released browser: %v, want not found", err)
	}
}
