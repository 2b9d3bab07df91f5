package fx

import (
	"slices"
	"testing"
)

func TestParseList(t *testing.T) {
	if got := ParseList("a, b"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("got %q", got)
	}
}

func TestParseListEmpty(t *testing.T) {
	if got := ParseList(""); len(got) != 0 {
		t.Errorf("ParseList(\"\") = %q, want none", got)
	}
}
