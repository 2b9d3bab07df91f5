package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/tests/testimage"
)

// A tenant builds a started template through the Go client; a sandbox
// created from it answers its first request through the port route with
// the build's process; another tenant sees and uses none of it.
func TestTemplateRoutes(t *testing.T) {
	var proxy *ports.Proxy
	tf := withTenants(t, newFixture(t, func(o *httpapi.Options) {
		proxy = ports.New(o.Manager.DialPort)
		o.Ports = proxy
	}))
	t.Cleanup(proxy.Close)
	ctx := context.Background()
	a, b := tf.clients["a"], tf.clients["b"]

	tmpl, err := a.BuildTemplate(ctx, api.TemplateRequest{Name: "web", Start: testimage.SlowServer(8080, time.Second),
		Env: []string{"GREETING=hi"}, Ready: &api.TemplateReady{Port: 8080, Timeout: api.Duration(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Snapshot == "" || tmpl.Tenant != "a" || tmpl.Ready.Port != 8080 {
		t.Fatalf("template %+v", tmpl)
	}
	sb, err := a.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	code, body := tf.as("a", "GET", "/v1/sandboxes/"+sb.ID+"/ports/8080/", "")
	if code != http.StatusOK || !strings.HasSuffix(body, " hi") {
		t.Fatalf("first request through the port route: %d %q", code, body)
	}
	if got, err := a.Template(ctx, "web"); err != nil || got.Snapshot != tmpl.Snapshot {
		t.Errorf("inspect: %+v, %v", got, err)
	}
	if ts, err := a.Templates(ctx); err != nil || len(ts) != 1 {
		t.Errorf("a's list: %d, %v", len(ts), err)
	}

	// b: no such template anywhere, as for one that never existed.
	if ts, err := b.Templates(ctx); err != nil || len(ts) != 0 {
		t.Errorf("b's list: %d, %v", len(ts), err)
	}
	if _, err := b.Template(ctx, "web"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("b inspects a's template: %v", err)
	}
	if code, body := tf.as("b", "DELETE", "/v1/templates/web", ""); code != http.StatusNotFound {
		t.Errorf("b removes a's template: %d %s", code, body)
	}
	if _, err := b.Create(ctx, sandbox.CreateOptions{Image: "web", Start: true}); err == nil {
		t.Error("b created from a's template")
	}

	for _, c := range []struct {
		who, body string
		want      int
	}{
		{"a", `{"name":"../x"}`, http.StatusBadRequest},
		{"a", `{"name":"x","public":true}`, http.StatusForbidden},
		{"a", `{"name":"x","ready":{"port":80}}`, http.StatusBadRequest},
		{"a", `{"name":"x","start":["true"],"ready":{"url":"http://example.com/"}}`, http.StatusBadRequest},
		{"a", `{"name":"x","start":["true"],"ready":{"timeout":"forever"}}`, http.StatusBadRequest},
		{"a", `{"name":"x","image":"nothing-here"}`, http.StatusNotFound},
		{"a", `{"name":"x","bogus":1}`, http.StatusBadRequest},
	} {
		if code, body := tf.as(c.who, "POST", "/v1/templates", c.body); code != c.want {
			t.Errorf("POST %s as %s: %d %s, want %d", c.body, c.who, code, body, c.want)
		}
	}

	if err := a.RemoveTemplate(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	code, body = tf.as("a", "GET", "/v1/templates/web", "")
	var e api.Error
	if code != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil {
		t.Errorf("removed template: %d %s", code, body)
	}
}
