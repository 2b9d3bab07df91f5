package backend

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknown is the error for a backend name that a Set does not hold:
// this smolvm was built or configured without it.
var ErrUnknown = errors.New("backend not available")

// Set holds the backends a host offers, by name, and the default one that
// new sandboxes get unless they ask for another.
type Set struct {
	byName map[string]Backend
	names  []string
	def    Backend
}

// NewSet returns the Set of bs whose default is named def, or is bs[0]
// when def is empty.
func NewSet(def string, bs ...Backend) (*Set, error) {
	if len(bs) == 0 {
		return nil, errors.New("no backends")
	}
	s := &Set{byName: make(map[string]Backend, len(bs))}
	for _, b := range bs {
		if _, dup := s.byName[b.Name()]; dup {
			return nil, fmt.Errorf("two backends named %q", b.Name())
		}
		s.byName[b.Name()] = b
		s.names = append(s.names, b.Name())
	}
	if def == "" {
		def = bs[0].Name()
	}
	var err error
	if s.def, err = s.Get(def); err != nil {
		return nil, fmt.Errorf("default backend: %w", err)
	}
	return s, nil
}

// Get returns the backend named name.
func (s *Set) Get(name string) (Backend, error) {
	if b, ok := s.byName[name]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q (this smolvm has %s)", ErrUnknown, name, strings.Join(s.names, ", "))
}

// Default returns the default backend.
func (s *Set) Default() Backend { return s.def }

// All returns every backend, in the order NewSet was given them.
func (s *Set) All() []Backend {
	out := make([]Backend, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}
