// Package testmgr gives tests outside package sandbox a real Manager: a
// fresh data dir, real SQLite, real runsc.
package testmgr

import (
	"context"
	"testing"

	"smolvm.dev/smolvm/backend/gvisor"
	"smolvm.dev/smolvm/image"
	"smolvm.dev/smolvm/internal/testenv"
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
}

// New returns an Env over a fresh data dir. It skips the test without
// root or runsc (see testenv.Runsc), and removes every sandbox at cleanup.
func New(t testing.TB) *Env {
	t.Helper()
	runsc := testenv.Runsc(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	images, err := image.Open(ctx, dir, st)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.Open(ctx, dir, st)
	if err != nil {
		t.Fatal(err)
	}
	be, err := gvisor.New(gvisor.Config{Runsc: runsc})
	if err != nil {
		t.Fatal(err)
	}
	m, err := sandbox.New(ctx, sandbox.Options{DataDir: dir, Store: st, Images: images, Backend: be, AgentBinary: testenv.Agent(t), Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Sandboxes hold mounts under dir: remove them before TempDir's
		// cleanup tries to.
		sbs, _ := m.List(context.Background())
		for _, sb := range sbs {
			m.Remove(context.Background(), sb.ID, true)
		}
		m.GC(context.Background())
		st.Close()
	})
	return &Env{Dir: dir, Store: st, Images: images, Snapshots: snaps, Manager: m}
}
