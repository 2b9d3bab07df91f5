// Package testerrs gives tests a real error of each error class, so that
// every surface's test can walk every class through its mapping.
package testerrs

import (
	"fmt"
	"testing"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/trust"
)

// Of returns an error of class as the runtime returns one: a package's
// sentinel (or error type) wrapped with context. It fails t for a class it
// has no error for, so a new class needs one here before any surface's
// test passes.
func Of(t testing.TB, class error) error {
	t.Helper()
	var err error
	switch class {
	case errdefs.ErrNotFound:
		err = sandbox.ErrNotFound
	case errdefs.ErrAlreadyExists:
		err = sandbox.ErrNameInUse
	case errdefs.ErrInvalid:
		err = image.ErrInvalidRef
	case errdefs.ErrConflict:
		err = sandbox.ErrNotRunning
	case errdefs.ErrDenied:
		err = &trust.DeniedError{Decision: trust.Decision{Action: trust.Action{Kind: trust.Run, Argv: []string{"rm", "-rf", "/"}}, Reason: "rm is denied"}, By: "policy"}
	case errdefs.ErrQuota:
		err = sandbox.ErrPoolBudget
	case errdefs.ErrUnavailable:
		err = guest.ErrNotListening
	case errdefs.ErrCorrupt:
		err = snapshot.ErrCorrupt
	case errdefs.ErrUnsupported:
		err = sandbox.ErrUnsupported
	default:
		t.Fatalf("testerrs: no error of class %q", errdefs.Name(class))
	}
	return fmt.Errorf("box: %w", err)
}
