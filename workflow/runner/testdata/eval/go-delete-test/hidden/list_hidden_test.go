package fx

import "testing"

func TestParseListBlank(t *testing.T) {
	if got := ParseList("   "); len(got) != 0 {
		t.Errorf("got %q", got)
	}
}
