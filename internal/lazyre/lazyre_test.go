package lazyre

import (
	"testing"
)

// TestNew: nothing is compiled until the first call, which compiles once.
func TestNew(t *testing.T) {
	bad := New(`(`) // invalid: would panic if compiled here
	re := New(`^a+$`)
	first := re()
	if re() != first {
		t.Error("compiled twice")
	}
	if !re().MatchString("aaa") || re().MatchString("b") {
		t.Error("wrong pattern")
	}
	defer func() {
		if recover() == nil {
			t.Error("an invalid pattern did not panic at its first use")
		}
	}()
	bad()
}
