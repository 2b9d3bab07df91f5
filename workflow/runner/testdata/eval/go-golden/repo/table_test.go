package fx

import (
	"os"
	"testing"
)

func TestRender(t *testing.T) {
	want, err := os.ReadFile("testdata/table.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got := Render("name", []string{"a", "b"}); got != string(want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
