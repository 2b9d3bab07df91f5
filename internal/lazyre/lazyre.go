// Package lazyre compiles a package's regular expressions on first use, so
// that a CLI command never pays at start-up for patterns it never matches.
package lazyre

import (
	"regexp"
	"sync"
)

// New returns a function that compiles expr at its first call (panicking,
// as regexp.MustCompile does, if expr is invalid) and returns the same
// *regexp.Regexp at every call.
func New(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
