package bench

import "testing"

// Each path gets its own line; the library's is compared with stock, the
// others with the library's, so the ratio shows what they add.
func TestPathSeries(t *testing.T) {
	paths := []path{{name: libraryPath}, {name: "HTTP API"}, {name: "CLI"}}
	got := pathSeries("fork x1", "runsc pipeline", paths)
	want := []Series{
		{Name: "fork x1 (Go library)", Baseline: "runsc pipeline"},
		{Name: "fork x1 (HTTP API)", Baseline: "fork x1 (Go library)"},
		{Name: "fork x1 (CLI)", Baseline: "fork x1 (Go library)"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d series, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Baseline != want[i].Baseline {
			t.Errorf("series %d: got %q vs %q, want %q vs %q", i, got[i].Name, got[i].Baseline, want[i].Name, want[i].Baseline)
		}
	}
}
