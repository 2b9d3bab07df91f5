package sample

import "testing"

func TestPass(t *testing.T) {}

func TestFail(t *testing.T) { t.Errorf("got 2, want 3") }

func TestSkip(t *testing.T) { t.Skip("not here") }

func TestSub(t *testing.T) {
	t.Run("a", func(t *testing.T) {})
	t.Run("b", func(t *testing.T) { t.Fatal("b broke") })
}
