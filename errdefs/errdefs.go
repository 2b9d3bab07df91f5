// Package errdefs defines the classes smolvm's errors fall into, which each
// surface (the native API, E2B, the Go client, MCP) maps to its own codes.
//
// A package declares its sentinels with New, so that errors.Is matches an
// error both against the sentinel and against its class:
//
//	var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "no such sandbox")
//
//	errors.Is(fmt.Errorf("get %s: %w", id, ErrNotFound), errdefs.ErrNotFound) // true
//
// It is modelled on containerd's errdefs, with fewer classes: those smolvm's
// errors fall into.
package errdefs

import "errors"

// The classes. Expired is not one: an expired sandbox is gone, so its error
// is of class NotFound (surfaces that tell the two apart do so with the
// error's data, sandbox.ExpiredError, not its class).
var (
	ErrNotFound      = &class{"not_found", "not found"}           // what was named does not exist, or no longer
	ErrAlreadyExists = &class{"already_exists", "already exists"} // a name or ID is taken
	ErrInvalid       = &class{"invalid", "invalid argument"}      // the request is malformed or out of range
	ErrConflict      = &class{"conflict", "conflict"}             // the target is in the wrong state (not running, in use)
	ErrDenied        = &class{"denied", "denied"}                 // a policy refused the action
	ErrQuota         = &class{"quota", "quota reached"}           // a limit or budget is used up (pool memory, archive size)
	ErrUnavailable   = &class{"unavailable", "unavailable"}       // cannot be reached now (the guest agent); retrying may work
	ErrCorrupt       = &class{"corrupt", "corrupt"}               // stored data failed verification
	ErrUnsupported   = &class{"unsupported", "not supported"}     // this backend or server cannot do it
)

// classes is every class, in the order Class tries them.
var classes = []*class{ErrNotFound, ErrAlreadyExists, ErrInvalid, ErrConflict, ErrDenied, ErrQuota, ErrUnavailable, ErrCorrupt, ErrUnsupported}

type class struct{ name, msg string }

func (c *class) Error() string { return c.msg }

// Classes returns every class.
func Classes() []error {
	out := make([]error, len(classes))
	for i, c := range classes {
		out[i] = c
	}
	return out
}

// Class returns the class err belongs to, nil for none.
func Class(err error) error {
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Name returns the name of err's class ("not_found", "already_exists",
// ...), which surfaces put on the wire; "" if err has no class.
func Name(err error) string {
	if c, ok := Class(err).(*class); ok {
		return c.name
	}
	return ""
}

// Parse returns the class called name, nil for none.
func Parse(name string) error {
	for _, c := range classes {
		if c.name == name {
			return c
		}
	}
	return nil
}

// New returns an error of class with the message msg: a package's
// sentinel, or an error made on the spot.
func New(class error, msg string) error {
	return &classed{msg: msg, class: class}
}

// classed is an error of a class. It matches its class with Is rather than
// unwrapping to it, so that errors.Unwrap of a sentinel stays nil.
type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }

func (e *classed) Is(target error) bool { return target == e.class }
