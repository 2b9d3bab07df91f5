// Package testdeps builds what a sandbox.Manager is made of, for integration
// tests of the sandbox package and the packages above it.
package testdeps

import (
	"context"
	"testing"

	"smolvm.dev/smolvm/internal/testenv"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/workflow/trust"
)

// Deps is a data dir with its stores, the real runsc backend and a fresh
// agent. The manager itself is left to the caller: the sandbox package's
// own tests cannot import a package that imports it.
type Deps struct {
	Dir         string
	Store       *store.Store
	Images      *image.Store
	Snapshots   *snapshot.Store
	Backend     *gvisor.Backend
	GuestBinary string
	// Gate is the trust policy's exec gate over Store.
	Gate *trust.Gates
}

// Open returns Deps over dir, with store handles of their own, skipping
// like testenv.Runsc without root or runsc. The store closes when the test
// ends, after cleanups registered later (removing sandboxes) have run.
func Open(t testing.TB, dir string) *Deps {
	t.Helper()
	runsc := testenv.Runsc(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
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
	return &Deps{Dir: dir, Store: st, Images: images, Snapshots: snaps, Backend: be, GuestBinary: testenv.Guest(t), Gate: trust.NewGates(st)}
}
