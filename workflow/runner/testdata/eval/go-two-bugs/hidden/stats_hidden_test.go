package fx

import "testing"

func TestStatsHidden(t *testing.T) {
	if Mean([]float64{4}) != 4 || Max([]float64{-7}) != -7 || Max(nil) != 0 {
		t.Fatal("stats")
	}
}
