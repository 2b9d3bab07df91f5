//go:build tools

// Package runsc records the gVisor runsc command as a build dependency, so
// that its version is pinned by this module's go.mod and go.sum.
package runsc

import _ "gvisor.dev/gvisor/runsc"
