package flock

import (
	"path/filepath"
	"testing"
	"time"
)

// TestLock: a second Lock waits for the first's unlock, Held sees the lock
// only while it is held, and a missing file is not held.
func TestLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "l")
	if Held(p) {
		t.Fatal("a missing file is held")
	}
	unlock, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(p) {
		t.Fatal("not held while locked")
	}
	got := make(chan struct{})
	go func() {
		u, err := Lock(p)
		if err != nil {
			t.Error(err)
		} else {
			u()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second Lock did not wait for the first")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	<-got
	if Held(p) {
		t.Fatal("held after both unlocked")
	}
}
