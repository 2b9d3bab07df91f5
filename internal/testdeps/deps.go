// Package testdeps builds what a sandbox.Manager is made of, for integration
// tests of the packages above it.
package testdeps

import (
	"context"
	"testing"

	"smolvm.dev/smolvm/backend/gvisor"
	"smolvm.dev/smolvm/image"
	"smolvm.dev/smolvm/internal/testenv"
	"smolvm.dev/smolvm/store"
)

// Deps is what a sandbox.Manager is built from: a fresh data dir with its
// store and image store, the real runsc backend and a fresh agent. (The
// manager itself is left to the caller: the sandbox package's own tests
// cannot import a package that imports it.)
type Deps struct {
	Dir         string
	Store       *store.Store
	Images      *image.Store
	Backend     *gvisor.Backend
	AgentBinary string
}

// New returns Deps over t.TempDir(), skipping like testenv.Runsc without root or
// runsc. The store closes when the test ends, after cleanups registered
// later (removing sandboxes) have run.
func New(t testing.TB) *Deps {
	t.Helper()
	runsc := testenv.Runsc(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	images, err := image.Open(ctx, dir, st)
	if err != nil {
		t.Fatal(err)
	}
	be, err := gvisor.New(gvisor.Config{Runsc: runsc})
	if err != nil {
		t.Fatal(err)
	}
	return &Deps{Dir: dir, Store: st, Images: images, Backend: be, AgentBinary: testenv.Agent(t)}
}
