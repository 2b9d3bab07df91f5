package fx

import "testing"

func TestReverse(t *testing.T) {
	if got := Reverse("abc"); got != "cba" {
		t.Errorf("got %q", got)
	}
}

func TestReverseUnicode(t *testing.T) {
	if got := Reverse("héllo"); got != "olléh" {
		t.Errorf("got %q", got)
	}
}
