package fx

import "testing"

func TestSum(t *testing.T) {
	if Sum([]int{1, 2}) != 3 {
		t.Error("1+2")
	}
	if got := Sum(nil); got != 0 {
		t.Errorf("Sum(nil) = %d", got)
	}
}
