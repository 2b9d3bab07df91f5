package httpapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

type openapiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

// TestOpenAPIMatchesRoutes checks openapi.json against the server: every
// registered route is described and every described route is registered,
// every $ref resolves, and each request schema has exactly the fields
// the decoder accepts.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := New(Options{})
	var doc openapiDoc
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var described []string
	for path, ops := range doc.Paths {
		for method := range ops {
			described = append(described, strings.ToUpper(method)+" "+path)
		}
	}
	registered := s.Routes()
	slices.Sort(described)
	slices.Sort(registered)
	for _, r := range registered {
		if !slices.Contains(described, r) {
			t.Errorf("route %q is not in openapi.json", r)
		}
	}
	for _, d := range described {
		if !slices.Contains(registered, d) {
			t.Errorf("openapi.json describes %q, which the server does not serve", d)
		}
	}

	for _, ref := range strings.Split(string(openapiJSON), `"$ref": "#/components/schemas/`)[1:] {
		name, _, _ := strings.Cut(ref, `"`)
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("$ref to missing schema %q", name)
		}
	}
	for name, v := range map[string]any{
		"CreateRequest": api.CreateRequest{}, "ExecRequest": api.ExecRequest{}, "StopRequest": api.StopRequest{},
		"TimeoutRequest": api.TimeoutRequest{}, "ForkRequest": api.ForkRequest{}, "CheckpointRequest": api.CheckpointRequest{},
		"RestoreRequest": api.RestoreRequest{}, "PoolRequest": api.PoolRequest{}, "TemplateRequest": api.TemplateRequest{}, "TemplateReady": api.TemplateReady{}, "NetworkUpdateRequest": api.NetworkUpdateRequest{}, "ExecEvent": api.ExecEvent{}, "WSControl": api.WSControl{}, "LogEvent": api.LogEvent{},
		"Error": api.Error{}, "BrowserStartRequest": api.BrowserStartRequest{}, "BrowserRequest": api.BrowserRequest{},
		"Browser": api.Browser{}, "ScreenshotRequest": api.ScreenshotRequest{}, "PullRequest": api.PullRequest{},
		"VolumeRequest": api.VolumeRequest{}, "Volume": sandbox.Volume{}, "VolumeMount": sandbox.VolumeMount{},
		"AgentRunRequest": api.AgentRunRequest{}, "AgentResumeRequest": api.AgentResumeRequest{},
	} {
		var fields []string
		// An embedded struct's fields are its parent's on the wire.
		for _, f := range reflect.VisibleFields(reflect.TypeOf(v)) {
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); !f.Anonymous && tag != "-" && tag != "" {
				fields = append(fields, tag)
			}
		}
		var props []string
		for p := range doc.Components.Schemas[name].Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s has %v; the Go type has %v", name, props, fields)
		}
	}

	// And the server serves the document itself.
	w, _ := call(t, s, http.MethodGet, "/openapi.json", "", nil)
	if w.Code != http.StatusOK || w.Body.Len() != len(openapiJSON) {
		t.Fatalf("GET /openapi.json: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// TestOpenAPIStats: the Stats schema lists every field the server sends.
func TestOpenAPIStats(t *testing.T) {
	var doc openapiDoc
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sandbox.Stats{})
	var fields map[string]any
	json.Unmarshal(b, &fields)
	for f := range fields {
		if _, ok := doc.Components.Schemas["Stats"].Properties[f]; !ok {
			t.Errorf("Stats field %s is not in openapi.json", f)
		}
	}
	if len(fields) != len(doc.Components.Schemas["Stats"].Properties) {
		t.Errorf("Stats schema has %d fields, the type %d", len(doc.Components.Schemas["Stats"].Properties), len(fields))
	}
}
