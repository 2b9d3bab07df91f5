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

// Each runs f for every class, in a subtest named for the class, with an
// error of that class as the runtime returns one: a package's sentinel (or
// error type) wrapped with context. A class it has no error for fails, so
// a new class needs one here before any surface's test passes.
func Each(t *testing.T, f func(t *testing.T, class, err error)) {
	denied := &trust.DeniedError{Decision: trust.Decision{Action: trust.Action{Kind: trust.Run, Argv: []string{"rm", "-rf", "/"}}, Reason: "rm is denied"}, By: "policy"}
	byClass := map[error]error{
		errdefs.ErrNotFound: sandbox.ErrNotFound, errdefs.ErrAlreadyExists: sandbox.ErrNameInUse,
		errdefs.ErrInvalid: image.ErrInvalidRef, errdefs.ErrConflict: sandbox.ErrNotRunning,
		errdefs.ErrDenied: denied, errdefs.ErrQuota: sandbox.ErrPoolBudget,
		errdefs.ErrUnavailable: guest.ErrNotListening, errdefs.ErrCorrupt: snapshot.ErrCorrupt,
		errdefs.ErrUnsupported: sandbox.ErrUnsupported,
	}
	for _, class := range errdefs.Classes() {
		t.Run(errdefs.Name(class), func(t *testing.T) {
			err, ok := byClass[class]
			if !ok {
				t.Fatal("testerrs: no error of this class")
			}
			f(t, class, fmt.Errorf("box: %w", err))
		})
	}
}
