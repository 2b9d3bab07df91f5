package fx

import "testing"

func TestRenderWide(t *testing.T) {
	if got := Render("ab", nil); got != "ab\n--\n\n" {
		t.Errorf("got %q", got)
	}
}
