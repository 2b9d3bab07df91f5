package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// waitExpired polls until ref's lookup says it expired.
func waitExpired(t *testing.T, m *testManager, ref string, within time.Duration) *sandbox.ExpiredError {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, err := m.Get(context.Background(), ref)
		var ee *sandbox.ExpiredError
		if errors.As(err, &ee) {
			return ee
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s did not expire within %s", ref, within)
	return nil
}

func TestLifetimes(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()

	t.Run("ttl expires, stays listed, then leaves a tombstone", func(t *testing.T) {
		events, stop := m.Subscribe(ctx)
		defer stop()
		sb := m.run(t, sandbox.Config{TTL: 1500 * time.Millisecond})
		if sb.ExpiresAt == nil {
			t.Fatal("no expiry recorded")
		}
		ee := waitExpired(t, m, sb.Name, 20*time.Second)
		if !errors.Is(ee, sandbox.ErrExpired) || errors.Is(ee, sandbox.ErrNotFound) {
			t.Fatalf("error %v does not match ErrExpired alone", ee)
		}
		if !ee.At.Equal(*sb.ExpiresAt) || !strings.Contains(ee.Error(), "time to live (1.5s) ended") ||
			!strings.Contains(ee.Error(), sb.ExpiresAt.Format(time.RFC3339)) {
			t.Fatalf("expired error %q at %v, want the deadline %v", ee, ee.At, sb.ExpiresAt)
		}
		if _, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); !errors.Is(err, sandbox.ErrExpired) {
			t.Fatalf("exec in an expired sandbox: %v", err)
		}
		list, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !listed(list, sb.ID, sandbox.StateExpired) {
			t.Fatalf("expired sandbox not listed as expired: %+v", list)
		}
		if !sawEvent(events, sb.ID, "expired") {
			t.Fatal("no expired event")
		}
		// Within the grace period Reap keeps it; past it, it goes.
		if gone, err := m.Reap(ctx, time.Hour); err != nil || len(gone) != 0 {
			t.Fatalf("reap within grace: %v %v", gone, err)
		}
		if gone, err := m.Reap(ctx, 0); err != nil || len(gone) != 1 {
			t.Fatalf("reap past grace: %v %v", gone, err)
		}
		_, err = m.Get(ctx, sb.Name)
		var later *sandbox.ExpiredError
		if !errors.As(err, &later) || !later.At.Equal(ee.At) || later.Sandbox != nil || !strings.Contains(err.Error(), "since removed") {
			t.Fatalf("lookup after removal: %v", err)
		}
	})

	t.Run("unknown and removed sandboxes are told apart", func(t *testing.T) {
		_, err := m.Get(ctx, "never-was")
		if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "never existed") {
			t.Fatalf("unknown: %v", err)
		}
		sb := m.run(t, sandbox.Config{})
		if err := m.Remove(ctx, sb.Name, true); err != nil {
			t.Fatal(err)
		}
		_, err = m.Get(ctx, sb.Name)
		if !errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrExpired) || !strings.Contains(err.Error(), "was removed at") {
			t.Fatalf("removed: %v", err)
		}
	})

	t.Run("set ttl extends and removes the deadline", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{TTL: 2 * time.Second})
		got, err := m.SetTTL(ctx, sb.ID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 59*time.Minute || got.Config.TTL != time.Hour {
			t.Fatalf("after SetTTL(1h): %+v", got)
		}
		time.Sleep(3 * time.Second)
		if _, _, exit := m.sh(t, sb, "true"); exit.Code != 0 {
			t.Fatalf("extended sandbox: %+v", exit)
		}
		if got, err := m.SetTTL(ctx, sb.ID, 0); err != nil || got.ExpiresAt != nil {
			t.Fatalf("SetTTL(0): %+v %v", got, err)
		}
		// Shorten it: the agent must take the new, earlier deadline.
		if _, err := m.SetTTL(ctx, sb.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		waitExpired(t, m, sb.ID, 15*time.Second)
		if _, err := m.SetTTL(ctx, sb.ID, time.Hour); !errors.Is(err, sandbox.ErrExpired) {
			t.Fatalf("SetTTL of an expired sandbox: %v", err)
		}
		// Starting an expired sandbox again is allowed, with a fresh TTL.
		again, err := m.Start(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if again.State != sandbox.StateRunning || again.ExpiresAt == nil || !again.ExpiresAt.Equal(again.StartedAt.Add(time.Second)) {
			t.Fatalf("restarted: %+v", again)
		}
	})

	t.Run("on expiry pause, and resume rearms the ttl", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{TTL: time.Second, OnExpiry: sandbox.ExpiryPause})
		var got *sandbox.Sandbox
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := m.Reap(ctx, time.Hour); err != nil {
				t.Fatal(err)
			}
			var err error
			if got, err = m.Get(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if got.State == sandbox.StatePaused {
				break
			}
		}
		if got.State != sandbox.StatePaused || got.Reason != reasonPaused || got.ExpiresAt != nil {
			t.Fatalf("after the TTL: %+v", got)
		}
		if _, err := m.SetTTL(ctx, sb.ID, time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := m.Resume(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != sandbox.StateRunning || got.Reason != "" || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 59*time.Minute {
			t.Fatalf("resumed: %+v", got)
		}
		if _, _, exit := m.sh(t, sb, "true"); exit.Code != 0 {
			t.Fatalf("exec after resume: %+v", exit)
		}
	})

	t.Run("idle timeout counts only idle time", func(t *testing.T) {
		sb := m.run(t, sandbox.Config{IdleTimeout: 1500 * time.Millisecond})
		// A 3 s exec keeps it busy past the idle timeout.
		if _, _, exit := m.sh(t, sb, "sleep 3"); exit.Code != 0 {
			t.Fatalf("busy exec was cut: %+v", exit)
		}
		ee := waitExpired(t, m, sb.ID, 15*time.Second)
		if !strings.Contains(ee.Reason, "idle for 1.5s") {
			t.Fatalf("reason %q", ee.Reason)
		}
	})
}

// TestLifetimeSurvivesRestart: a second Manager over the same data dir (a
// restarted server) sees the sandbox with its remaining TTL, and the
// deadline still holds.
func TestLifetimeSurvivesRestart(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{TTL: 4 * time.Second})

	m2 := openManager(t, m.dir)
	got, err := m2.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != sandbox.StateRunning || got.ExpiresAt == nil || !got.ExpiresAt.Equal(*sb.ExpiresAt) {
		t.Fatalf("after restart: %+v, want running until %v", got, sb.ExpiresAt)
	}
	waitExpired(t, m2, sb.ID, 20*time.Second)
}

func listed(list []*sandbox.Sandbox, id string, st sandbox.State) bool {
	for _, sb := range list {
		if sb.ID == id && sb.State == st {
			return true
		}
	}
	return false
}

func sawEvent(c <-chan sandbox.Event, id, typ string) bool {
	for {
		select {
		case e, ok := <-c:
			if !ok {
				return false
			}
			if e.ID == id && e.Type == typ {
				return true
			}
		case <-time.After(5 * time.Second):
			return false
		}
	}
}
