package manager

import (
	"context"
	"slices"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestRecover leaves three records as a crash between the last step of a
// create and its record would: a sandbox that runs (rolled forward), one
// whose processes died (rolled back), and a fork's copy (rolled back: a
// fork is all or nothing). Recover completes the first, removes the
// others and frees their names, and has nothing to do a second time.
func TestRecover(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	done, dead, copied := m.run(t, sandbox.Config{TTL: sandbox.DefaultTTL}), m.run(t, sandbox.Config{}), m.run(t, sandbox.Config{})
	for _, sb := range []*sandbox.Sandbox{done, dead, copied} {
		r := lookupT(t, m, sb.ID)
		r.State, r.StartedAt, r.ExpiresAt = sandbox.StateCreating, nil, nil
		if sb == copied {
			r.ForkedFrom = done.ID
		}
		if err := update(ctx, m.st, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := lookupT(t, m, dead.ID).be.Delete(ctx, &lookupT(t, m, dead.ID).spec); err != nil {
		t.Fatal(err)
	}

	completed, removed, err := m.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(completed, []string{done.Name}) {
		t.Errorf("completed %q, want %q", completed, done.Name)
	}
	for _, sb := range []*sandbox.Sandbox{dead, copied} {
		if !slices.Contains(removed, "orphaned sandbox "+sb.Name) {
			t.Errorf("removed %q: %s missing", removed, sb.Name)
		}
		if _, err := m.Create(ctx, sandbox.CreateOptions{Name: sb.Name}); err != nil {
			t.Errorf("the name of rolled-back %s: %v", sb.Name, err)
		}
	}
	got, err := m.Get(ctx, done.ID)
	if err != nil || got.State != sandbox.StateRunning || got.StartedAt == nil || got.ExpiresAt == nil {
		t.Fatalf("completed sandbox: %+v %v", got, err)
	}
	if out, _, _ := m.sh(t, got, "echo ok"); out != "ok\n" {
		t.Fatalf("completed sandbox does not run commands: %q", out)
	}
	if completed, removed, err := m.Recover(ctx); len(completed)+len(removed) != 0 || err != nil {
		t.Fatalf("second recovery: %q %q %v", completed, removed, err)
	}
}
