package jsondup

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type inner struct {
	Mode  string   `json:"mode"`
	Hosts []string `json:"hosts"`
}

type embedded struct {
	ID string `json:"id"`
}

type request struct {
	embedded
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels"`
	Network *inner            `json:"network"`
	List    []inner           `json:"list"`
	Raw     json.RawMessage   `json:"raw"`
	Any     any               `json:"any"`
	Skip    string            `json:"-"`
	NoTag   int
}

// TestCheck: a key given twice is found at any depth, by its path; keys
// that name one struct field in other case are the same key, but a map's
// keys differ by case; nesting past MaxDepth is refused.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		body, path string
	}{
		{`{"name":"a","name":"b"}`, "name"},
		{`{"name":"a","Name":"b"}`, "Name"},
		{`{"name":"a","NAME":"b"}`, "NAME"},
		{`{"id":"a","ID":"b"}`, "ID"},
		{`{"NoTag":1,"notag":2}`, "notag"},
		{`{"labels":{"a":"1","a":"2"}}`, "labels.a"},
		{`{"network":{"mode":"x","hosts":[],"mode":"y"}}`, "network.mode"},
		{`{"list":[{},{"mode":"x","Mode":"y"}]}`, "list[1].Mode"},
		{`{"raw":{"x":{"y":1,"y":2}}}`, "raw.x.y"},
		{`{"any":[[{"k":1,"k":1}]]}`, "any[0][0].k"},
		{`{"nope":1,"nope":2}`, "nope"},
	} {
		var v request
		if err := json.Unmarshal([]byte(c.body), &v); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		err := Check([]byte(c.body), &v)
		var e *Error
		if !errors.As(err, &e) || e.Path != c.path || e.Deep || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v, want the key %q given twice", c.body, err, c.path)
		}
	}
	for _, ok := range []string{
		`{"name":"a","labels":{"a":"1","A":"2"},"network":{"mode":"x"},"list":[{"mode":"a"},{"mode":"a"}]}`,
		`{"raw":{"A":1,"a":2},"any":{"k":1,"K":1}}`, `{"Skip":1,"skip":2}`, `[]`, `"x"`, `null`, `{}`,
	} {
		var v request
		if err := Check([]byte(ok), &v); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	deep := strings.Repeat(`{"any":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	if err := Check([]byte(deep), &request{}); err != nil {
		t.Errorf("%d levels: %v", MaxDepth, err)
	}
	deeper := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	var e *Error
	if err := Check([]byte(deeper), new(any)); !errors.As(err, &e) || !e.Deep {
		t.Errorf("%d levels: %v, want refused", MaxDepth+1, err)
	}
}
