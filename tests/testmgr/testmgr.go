// Package testmgr gives tests outside package manager a real Manager: a
// fresh data dir, real SQLite, real runsc. (Package manager's own tests
// cannot import it, which would be a cycle: they have newManager.)
package testmgr

import (
	"context"
	"testing"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/tests/testdeps"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/trust"
)

// Env is a Manager and the stores it works with.
type Env struct {
	Dir       string
	Store     *store.Store
	Images    *image.Store
	Snapshots *snapshot.Store
	Manager   *manager.Manager
	// GuestBinary is the agent the Manager boots, for a smolvm process
	// started over the same dir (SMOLVM_GUEST_BINARY).
	GuestBinary string
}

// New returns an Env over a fresh data dir. It skips the test without
// root or runsc (see testenv.Runsc), and removes every sandbox at cleanup.
// opts adjust the Manager's config (a network host, say).
func New(t testing.TB, opts ...func(*manager.Config)) *Env { return Open(t, t.TempDir(), opts...) }

// Open is New over dir, which other processes (a smolvm serve under test)
// may use too: every sandbox in it is removed at cleanup.
func Open(t testing.TB, dir string, opts ...func(*manager.Config)) *Env {
	t.Helper()
	c := manager.Config{DataDir: dir, Backends: testdeps.Backends(t), GuestBinary: testenv.Guest(t),
		Gate: func(st *store.Store) manager.Gate { return trust.NewGates(st) }}
	for _, f := range opts {
		f(&c)
	}
	m, err := manager.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after the removals below and
	// whatever cleanups the test registers later.
	t.Cleanup(func() { m.Close() })
	t.Cleanup(func() {
		// Sandboxes hold mounts under dir: remove them before TempDir's
		// cleanup tries to. Pool members are unlisted: remove pools first.
		pools, _ := m.Pools(context.Background())
		for _, p := range pools {
			m.RemovePool(context.Background(), p.Name)
		}
		sbs, _ := m.List(context.Background())
		for _, sb := range sbs {
			m.Remove(context.Background(), sb.ID, true)
		}
		m.GC(context.Background())
		// Volumes are mounted under dir too; each is its tenant's.
		vs, _ := m.ListVolumes(context.Background())
		for _, v := range vs {
			m.RemoveVolume(tenant.With(context.Background(), v.Tenant), v.Name, true)
		}
	})
	return &Env{Dir: dir, Store: m.Store(), Images: m.Images(), Snapshots: m.Snapshots(), Manager: m, GuestBinary: c.GuestBinary}
}
