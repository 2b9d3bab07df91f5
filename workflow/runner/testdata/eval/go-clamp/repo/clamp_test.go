package fx

import "testing"

func TestClamp(t *testing.T) {
	for _, c := range []struct{ v, want int }{{-1, 0}, {5, 5}, {15, 10}} {
		if got := Clamp(c.v, 0, 10); got != c.want {
			t.Errorf("Clamp(%d, 0, 10) = %d, want %d", c.v, got, c.want)
		}
	}
}
