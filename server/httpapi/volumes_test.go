package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// TestServerVolumes: the volume routes through the Go client and raw
// HTTP, tenant a's volume as missing to tenant b, a create that mounts
// it, and a remove refused while mounted.
func TestServerVolumes(t *testing.T) {
	tf := newTenantFixture(t)
	ctx := context.Background()
	a, b := tf.clients["a"], tf.clients["b"]
	v, err := a.CreateVolume(ctx, sandbox.VolumeOptions{Name: "work", Size: 32 << 20})
	if err != nil || v.Size != 32<<20 || v.Tenant != "a" {
		t.Fatalf("create: %+v %v", v, err)
	}
	if code, body := tf.as("a", "POST", "/v1/volumes", `{"name":"s","size":"16m"}`); code != http.StatusCreated || !strings.Contains(body, `"size":16777216`) {
		t.Errorf("create with a size string: %d %s", code, body)
	}
	for _, body := range []string{`{"name":"../x"}`, `{"name":"x","size":1}`, `{"name":"x","extra":1}`} {
		if code, out := tf.as("a", "POST", "/v1/volumes", body); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s", body, code, out)
		}
	}
	if _, err := a.CreateVolume(ctx, sandbox.VolumeOptions{Name: "work"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("twice: %v", err)
	}

	// Another tenant's volume is a missing one, word for word.
	_, missing := tf.as("b", "GET", "/v1/volumes/nope", "")
	code, other := tf.as("b", "GET", "/v1/volumes/work", "")
	if code != http.StatusNotFound || strings.ReplaceAll(other, "work", "nope") != missing {
		t.Errorf("b's GET of a's volume: %d %s; a missing one: %s", code, other, missing)
	}
	if code, _ := tf.as("b", "DELETE", "/v1/volumes/work?force=true", ""); code != http.StatusNotFound {
		t.Errorf("b's DELETE of a's volume: %d", code)
	}
	if vs, err := b.ListVolumes(ctx); err != nil || len(vs) != 0 {
		t.Errorf("b's list: %v %v", vs, err)
	}
	if _, err := b.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "work", Path: "/w"}}}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("b mounting a's volume: %v", err)
	}

	sb, err := a.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Volumes: []sandbox.VolumeMount{{Name: "work", Path: "/w"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteFile(ctx, sb.ID, "/w/hello", strings.NewReader("hi")); err != nil {
		t.Fatal(err)
	}
	err = a.RemoveVolume(ctx, "work", false)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), sb.Name) {
		t.Errorf("remove while mounted: %v", err)
	}
	got, err := a.GetVolume(ctx, "work")
	if err != nil || len(got.UsedBy) != 1 || got.UsedBy[0] != sb.Name || got.Used == 0 {
		t.Errorf("get: %+v %v", got, err)
	}
	if err := a.Remove(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveVolume(ctx, "work", false); err != nil {
		t.Errorf("remove once unmounted: %v", err)
	}
	if _, err := a.GetVolume(ctx, "work"); !errors.Is(err, sandbox.ErrVolumeNotFound) && !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after remove: %v", err)
	}
}
