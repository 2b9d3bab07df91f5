package sandbox

import (
	"io"
	"syscall"
	"time"
)

// Stdio is where an exec's streams come from and go to. Resize, when set,
// delivers window changes for a TTY; Signals forwards signals.
type Stdio struct {
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Resize  <-chan Size
	Signals <-chan syscall.Signal
}

// FileInfo describes one file system entry inside the sandbox. API layers
// (the E2B envd emulation) map it to their own shapes.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission and special bits
	Perm    string    `json:"perm"` // as ls prints them: -rw-r--r--
	UID     uint32    `json:"uid"`
	GID     uint32    `json:"gid"`
	ModTime time.Time `json:"mtime"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// Process describes a command to run inside the sandbox.
type Process struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"` // added to (and overriding) the sandbox's environment
	Dir  string   `json:"dir,omitempty"`
	User string   `json:"user,omitempty"` // name, uid or uid:gid; empty is the sandbox default
	TTY  bool     `json:"tty,omitempty"`
	Size *Size    `json:"size,omitempty"` // initial window size when TTY
	// Stdin tells the agent that the client will stream stdin; without it
	// the process reads /dev/null and never blocks waiting for input.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutMS kills the process group after that many milliseconds.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Size is a terminal window size.
type Size struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Exit ends every connection.
type Exit struct {
	Code int `json:"code"`
	// Signal is set when the process was killed by a signal; Code is then
	// 128+Signal, as a shell reports it.
	Signal int `json:"signal,omitempty"`
	// Error is set when the operation itself failed; Kind classifies it.
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// TimedOut is set when TimeoutMS expired.
	TimedOut bool `json:"timed_out,omitempty"`
	// Reason says why a sandbox's main process ended, in the exit file.
	Reason string `json:"reason,omitempty"`
}

// NotStarted reports whether the command never ran: it was not found, or
// could not be run (exit 127 or 126).
func (e Exit) NotStarted() bool { return e.Kind == KindNotFound || e.Kind == KindCannotRun }

// Error kinds.
const (
	KindNotFound  = "not-found"  // executable or path missing: exit 127
	KindCannotRun = "cannot-run" // permission, not executable, bad user: exit 126
	KindInvalid   = "invalid"    // malformed request
	KindIO        = "io"
	KindExists    = "exists"  // the path already exists
	KindRefused   = "refused" // nothing listens on the port dialed
)
