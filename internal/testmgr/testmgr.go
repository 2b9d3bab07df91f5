// Package testmgr gives tests outside package sandbox a real Manager: a
// fresh data dir, real SQLite, real runsc. (Package sandbox's own tests
// cannot import it, which would be a cycle: they have newManager.)
package testmgr

import (
	"context"
	"testing"

	"smolvm.dev/smolvm/image"
	"smolvm.dev/smolvm/internal/testdeps"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/snapshot"
	"smolvm.dev/smolvm/store"
)

// Env is a Manager and the stores it works with.
type Env struct {
	Dir       string
	Store     *store.Store
	Images    *image.Store
	Snapshots *snapshot.Store
	Manager   *sandbox.Manager
	// AgentBinary is the agent the Manager boots, for a smolvm process
	// started over the same dir (SMOLVM_AGENT_BINARY).
	AgentBinary string
}

// New returns an Env over a fresh data dir. It skips the test without
// root or runsc (see testenv.Runsc), and removes every sandbox at cleanup.
// opts adjust the Manager's options (a network host, say).
func New(t testing.TB, opts ...func(*sandbox.Options)) *Env { return Open(t, t.TempDir(), opts...) }

// Open is New over dir, which other processes (a smolvm serve under test)
// may use too: every sandbox in it is removed at cleanup.
func Open(t testing.TB, dir string, opts ...func(*sandbox.Options)) *Env {
	t.Helper()
	d := testdeps.Open(t, dir)
	o := sandbox.Options{DataDir: dir, Store: d.Store, Images: d.Images, Backend: d.Backend, AgentBinary: d.AgentBinary, Snapshots: d.Snapshots}
	for _, f := range opts {
		f(&o)
	}
	m, err := sandbox.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
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
	})
	return &Env{Dir: dir, Store: d.Store, Images: d.Images, Snapshots: d.Snapshots, Manager: m, AgentBinary: d.AgentBinary}
}
