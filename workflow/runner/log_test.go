package runner

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/proc"
	"smolvm.dev/smolvm/internal/store"
)

// TestRunOwnerGone: a run its smolvm left running (killed) reads as
// stopped, interrupted, in Get and Runs; one whose owner lives stays
// running.
func TestRunOwnerGone(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := OpenLog(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := proc.Owner{PID: cmd.Process.Pid, Start: 1}
	for id, owner := range map[string]proc.Owner{"killed": dead, "live": proc.Self()} {
		if err := l.Save(ctx, &Run{ID: id, Created: time.Now().UTC(), State: Running, Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Get(ctx, "killed")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != Stopped || !strings.Contains(r.Reason, "interrupted") {
		t.Errorf("a run whose smolvm is gone: %s %q", r.State, r.Reason)
	}
	runs, err := l.Runs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if want := map[string]State{"killed": Stopped, "live": Running}[r.ID]; r.State != want {
			t.Errorf("Runs: %s is %s, want %s", r.ID, r.State, want)
		}
	}
}
