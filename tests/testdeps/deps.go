// Package testdeps gives integration tests the backends of a
// manager.Config: the real gVisor backend. The manager package's own tests
// use it too, so it must not import the manager (tests/testmgr opens
// one for the packages above); the gvisor package's tests cannot use it.
package testdeps

import (
	"testing"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/tests/testenv"
)

// Backends returns the backends to test with, skipping like
// testenv.Runsc without root or runsc.
func Backends(t testing.TB) []backend.Backend {
	t.Helper()
	be, err := gvisor.New(gvisor.Config{Runsc: testenv.Runsc(t)})
	if err != nil {
		t.Fatal(err)
	}
	return []backend.Backend{be}
}
