package errdefs_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/archive"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/workflow/memory"
	"smolvm.dev/smolvm/workflow/trust"
	"smolvm.dev/smolvm/workflow/workspace"
)

// TestClasses: every class has its own name, which parses back; an error
// made with New keeps its message and matches its class, and no other.
func TestClasses(t *testing.T) {
	names := map[string]bool{}
	for _, c := range errdefs.Classes() {
		name := errdefs.Name(c)
		if name == "" || names[name] {
			t.Errorf("class %v: name %q empty or taken", c, name)
		}
		names[name] = true
		if errdefs.Parse(name) != c || errdefs.Class(c) != c {
			t.Errorf("class %q does not parse back to itself", name)
		}
		err := fmt.Errorf("ctx: %w", errdefs.New(c, "the message"))
		if err.Error() != "ctx: the message" || errdefs.Class(err) != c || errdefs.Name(err) != name {
			t.Errorf("%q: %v has class %v", name, err, errdefs.Class(err))
		}
		for _, other := range errdefs.Classes() {
			if other != c && errors.Is(err, other) {
				t.Errorf("%q: also matches %q", name, errdefs.Name(other))
			}
		}
	}
	if len(names) != 9 {
		t.Errorf("%d classes, want 9", len(names))
	}
	if errdefs.Class(errors.New("plain")) != nil || errdefs.Class(nil) != nil || errdefs.Name(errors.New("plain")) != "" || errdefs.Parse("nope") != nil {
		t.Error("an error of no class has one")
	}
}

// TestSentinels: each package's sentinels belong to one class, keep their
// messages, and still match themselves when wrapped.
func TestSentinels(t *testing.T) {
	for _, c := range []struct {
		sentinel error
		class    error
		msg      string
	}{
		{sandbox.ErrNotFound, errdefs.ErrNotFound, "no such sandbox"},
		{sandbox.ErrNameInUse, errdefs.ErrAlreadyExists, "name already in use"},
		{sandbox.ErrState, errdefs.ErrConflict, "wrong state"},
		{sandbox.ErrInvalid, errdefs.ErrInvalid, "invalid argument"},
		{sandbox.ErrOrphan, errdefs.ErrConflict, "orphaned by a crashed create"},
		{sandbox.ErrExpired, errdefs.ErrNotFound, "sandbox expired"},
		{sandbox.ErrPoolNotFound, errdefs.ErrNotFound, "no such pool"},
		{sandbox.ErrPoolBudget, errdefs.ErrQuota, "pool memory budget reached"},
		{sandbox.ErrUnsupported, errdefs.ErrUnsupported, "not supported by this backend"},
		{sandbox.ErrNotRunning, errdefs.ErrConflict, "sandbox is not running"},
		{backend.ErrNotRunning, errdefs.ErrConflict, "sandbox is not running"},
		{image.ErrNotFound, errdefs.ErrNotFound, "image not found"},
		{image.ErrInvalidRef, errdefs.ErrInvalid, "invalid image reference"},
		{image.ErrCorrupt, errdefs.ErrCorrupt, "corrupt image"},
		{snapshot.ErrNotFound, errdefs.ErrNotFound, "snapshot not found"},
		{snapshot.ErrCorrupt, errdefs.ErrCorrupt, "corrupt snapshot"},
		{snapshot.ErrInUse, errdefs.ErrConflict, "snapshot in use"},
		{snapshot.ErrNameInUse, errdefs.ErrAlreadyExists, "snapshot name in use"},
		{snapshot.ErrInvalidName, errdefs.ErrInvalid, "invalid snapshot name"},
		{sandbox.ErrInvalidNetwork, errdefs.ErrInvalid, "invalid network setting"},
		{guest.ErrUnavailable, errdefs.ErrUnavailable, "sandbox agent unavailable"},
		{guest.ErrNotListening, errdefs.ErrUnavailable, "sandbox agent unavailable: not listening"},
		{archive.ErrTooLarge, errdefs.ErrQuota, "archive exceeds size limit"},
		{trust.ErrDenied, errdefs.ErrDenied, "denied by policy"},
		{trust.ErrAnswered, errdefs.ErrConflict, "approval already answered"},
		{memory.ErrNotFound, errdefs.ErrNotFound, "no such fact"},
		{workspace.ErrNothingToCommit, errdefs.ErrConflict, "nothing to commit"},
	} {
		err := fmt.Errorf("box: %w", c.sentinel)
		if c.sentinel.Error() != c.msg || !errors.Is(err, c.sentinel) || errdefs.Class(err) != c.class {
			t.Errorf("%q: class %q, want %q", c.sentinel, errdefs.Name(err), errdefs.Name(c.class))
		}
	}
	if sandbox.ErrNotRunning != backend.ErrNotRunning {
		t.Error("sandbox.ErrNotRunning is not backend.ErrNotRunning")
	}
}

// TestErrorTypes: the errors that carry data match their sentinels and
// classes as the sentinels do.
func TestErrorTypes(t *testing.T) {
	expired := fmt.Errorf("get: %w", &sandbox.ExpiredError{Name: "box", At: time.Now()})
	if !errors.Is(expired, sandbox.ErrExpired) || errors.Is(expired, sandbox.ErrNotFound) || errdefs.Class(expired) != errdefs.ErrNotFound {
		t.Errorf("expired: class %q", errdefs.Name(expired))
	}
	denied := fmt.Errorf("exec: %w", &trust.DeniedError{By: "policy"})
	if !errors.Is(denied, trust.ErrDenied) || errdefs.Class(denied) != errdefs.ErrDenied {
		t.Errorf("denied: class %q", errdefs.Name(denied))
	}
	for kind, class := range map[string]error{
		sandbox.KindNotFound: errdefs.ErrNotFound,
		sandbox.KindExists:   errdefs.ErrAlreadyExists,
		sandbox.KindInvalid:  errdefs.ErrInvalid,
		sandbox.KindIO:       nil,
	} {
		err := fmt.Errorf("stat /x: %w", &sandbox.OpError{Exit: sandbox.Exit{Code: 1, Error: "no", Kind: kind}})
		if errdefs.Class(err) != class {
			t.Errorf("agent error of kind %q: class %q", kind, errdefs.Name(err))
		}
	}
}
