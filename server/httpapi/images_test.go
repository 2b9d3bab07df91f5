package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
)

// TestServerPull pulls from a registry on loopback through POST
// /v1/images: a pull, the image already here by reference or by ID, a
// tag that moved, the registry's refusals, and a sandbox of the pulled
// image that runs its program.
func TestServerPull(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	reg := testimage.Serve(t)
	ref, id := reg.Push(t, "smolvm/idle:1", map[string]string{"/marker": "one"})

	pull := func(body string, want int, hdr ...string) (sandbox.Image, api.Error) {
		t.Helper()
		code, b, _ := f.do(http.MethodPost, "/v1/images", body, hdr...)
		if code != want {
			t.Fatalf("POST /v1/images %s: %d %s, want %d", body, code, b, want)
		}
		var img sandbox.Image
		if code >= 300 {
			return img, apiError(t, b)
		}
		if err := json.Unmarshal(b, &img); err != nil {
			t.Fatal(err)
		}
		return img, api.Error{}
	}
	img, _ := pull(`{"ref":"`+ref+`"}`, http.StatusCreated)
	if img.ID != id || !slices.Contains(img.Refs, ref) || img.Source != "pull "+ref {
		t.Fatalf("pulled %+v, want %s as %s", img, id, ref)
	}
	if again, _ := pull(`{"ref":"`+ref+`"}`, http.StatusOK); again.ID != id {
		t.Fatalf("second pull %+v", again)
	}

	// The tag moves: what is here still answers by reference and by ID;
	// always follows the tag; an ID the tag no longer gives conflicts.
	_, id2 := reg.Push(t, "smolvm/idle:1", map[string]string{"/marker": "two"})
	if got, _ := pull(`{"ref":"`+ref+`","id":"`+id+`"}`, http.StatusOK); got.ID != id {
		t.Fatalf("by ID %+v", got)
	}
	if got, _ := pull(`{"ref":"`+ref+`","always":true}`, http.StatusCreated); got.ID != id2 {
		t.Fatalf("always: %s, want the moved tag's %s", got.ID, id2)
	}
	// An ID may be a prefix, as everywhere else.
	if got, _ := pull(`{"ref":"`+ref+`","always":true,"id":"`+id2[:19]+`"}`, http.StatusCreated); got.ID != id2 {
		t.Fatalf("by an ID prefix: %s, want %s", got.ID, id2)
	}
	if _, e := pull(`{"ref":"`+ref+`","id":"sha256:`+strings.Repeat("0", 64)+`"}`, http.StatusConflict); !strings.Contains(e.Message, "tag has moved") {
		t.Fatalf("a moved tag: %+v", e)
	}

	// The pulled image runs: its program prints its file.
	sb := f.create("pulled", `,"image":"`+ref+`"`)
	var out strings.Builder
	if exit, err := f.c.Exec(ctx, sb.ID, sandbox.Process{Args: []string{testimage.Program, "/marker"}}, sandbox.Stdio{Stdout: &out, Stderr: &out}); err != nil || exit.Code != 0 || out.String() != "/marker: two\n" {
		t.Fatalf("exec in the pulled image: %v %+v %q", err, exit, out.String())
	}

	// Bad input.
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{}`, http.StatusBadRequest, "ref"},
		{`{"ref":`, http.StatusBadRequest, ""},
		{`{"ref":"x","bogus":1}`, http.StatusBadRequest, "bogus"},
		{`{"ref":"Not/A/Ref"}`, http.StatusBadRequest, ""},
		{`{"ref":"` + ref + `","id":"alpine"}`, http.StatusBadRequest, "id"},
		{`{"ref":"` + reg.Host + `/smolvm/none:1"}`, http.StatusNotFound, "none"},
		{`{"ref":"127.0.0.1:1/smolvm/idle:1"}`, http.StatusServiceUnavailable, "registry unavailable"},
		{`{"ref":"` + ref + `","always":true,"platform":"a/b/c/d"}`, http.StatusBadRequest, "platform"},
	} {
		if _, e := pull(c.body, c.code); !strings.Contains(e.Message+e.Field, c.want) {
			t.Errorf("%s: %+v, want %q", c.body, e, c.want)
		}
	}
	// Images are the host's: a tenant cannot pull.
	if _, err := f.c.CreateTenant(ctx, api.TenantRequest{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	pull(`{"ref":"`+ref+`"}`, http.StatusForbidden, api.HeaderTenant, "acme")
}
