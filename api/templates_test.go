package api

import (
	"reflect"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// TestTemplateRequestRoundTrip: a template's options sent to a smolvm
// serve (a gateway's build on a node) arrive as they were; a field the
// wire forgets fails it.
func TestTemplateRequestRoundTrip(t *testing.T) {
	o := sandbox.TemplateOptions{Name: "web", Image: "img", Start: []string{"/bin/sh", "-c", "serve"}, Env: []string{"A=1"},
		WorkDir: "/srv", User: "app", Public: true, Hot: 2, Backend: "gvisor",
		Limits: sandbox.Limits{CPUs: 1.5, Memory: 256 << 20, Pids: 64, Disk: 1 << 30},
		Ready: sandbox.Ready{Port: 8080, URL: "http://localhost:8080/", Status: 204, File: "/tmp/up", Process: "serve", Cmd: "true",
			After: time.Second, Timeout: time.Minute}}
	if got := NewTemplateRequest(o).Options(); !reflect.DeepEqual(got, o) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, o)
	}
}
