package fx

import "testing"

func TestReverseHidden(t *testing.T) {
	if Reverse("日本") != "本日" || Reverse("") != "" {
		t.Fatal("runes")
	}
}
