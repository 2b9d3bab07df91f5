package fx

import "testing"

func TestClampHidden(t *testing.T) {
	if Clamp(11, 0, 10) != 10 || Clamp(10, 0, 10) != 10 || Clamp(-5, -3, 3) != -3 {
		t.Fatal("bounds")
	}
}
