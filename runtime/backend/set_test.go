package backend

import (
	"errors"
	"testing"
)

// named is a backend that only has a name.
type named struct {
	Backend
	name string
}

func (n named) Name() string { return n.name }

func TestSet(t *testing.T) {
	a, b := named{name: "a"}, named{name: "b"}
	s, err := NewSet("", a, b)
	if err != nil || s.Default() != Backend(a) {
		t.Fatalf("default of a, b: %v, %v", s, err)
	}
	if s, err = NewSet("b", a, b); err != nil || s.Default() != Backend(b) || len(s.All()) != 2 {
		t.Fatalf("default b: %v, %v", s, err)
	}
	if got, err := s.Get("a"); err != nil || got != Backend(a) {
		t.Fatalf("get a: %v, %v", got, err)
	}
	if _, err := s.Get("c"); !errors.Is(err, ErrUnknown) || err.Error() != `backend not available: "c" (this smolvm has a, b)` {
		t.Fatalf("get c: %v", err)
	}
	for name, bs := range map[string][]Backend{"none": nil, "twice": {a, a}} {
		if _, err := NewSet("", bs...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewSet("c", a, b); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown default: %v", err)
	}
}
