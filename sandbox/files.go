package sandbox

import (
	"context"
	"errors"
	"io"

	"smolvm.dev/smolvm/errdefs"
)

// FS is one running sandbox's file system, an operation at a time, for
// API layers that expose files piecemeal (E2B's envd: stat, list, rename,
// watch). It runs no command: commands go through Service.Exec, which
// applies the sandbox's policy. Paths are the sandbox's; a refusal is an
// *OpError whose Kind says why (KindNotFound, KindExists, ...).
type FS interface {
	// Stat describes path without following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// List describes the entries under the directory path, depth levels
	// deep.
	List(ctx context.Context, path string, depth int) ([]FileInfo, error)
	// Mkdir creates path and its parents; it fails with KindExists when
	// path is already there.
	Mkdir(ctx context.Context, path string) (FileInfo, error)
	// Rename moves from to to and describes the result.
	Rename(ctx context.Context, from, to string) (FileInfo, error)
	// Remove deletes path and everything under it.
	Remove(ctx context.Context, path string) error
	// ReadFile writes path's bytes to w.
	ReadFile(ctx context.Context, path string, w io.Writer) error
	// WriteFile replaces path with r's bytes, creating its parents, and
	// describes the result.
	WriteFile(ctx context.Context, path string, r io.Reader) (FileInfo, error)
	// Watch follows the directory path (every level below it when
	// recursive), calling fn with each change until ctx ends, fn fails or
	// the directory goes away. The first call has an empty Op: the watch
	// is in place. A missing directory fails before any call
	// (errdefs.ErrNotFound). A watch whose caller falls MaxWatchQueue
	// events behind ends with an error.
	Watch(ctx context.Context, path string, recursive bool, fn func(WatchEvent) error) error
}

// Watch event operations, as envd names them.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename" // the entry left this name (its new name, if watched, is a create)
	WatchChmod  = "chmod"
)

// MaxWatchQueue bounds the events of one watch read but not yet taken by
// its caller.
const MaxWatchQueue = 4096

// WatchEvent is one change under a watched directory. The first event of
// every watch has no Op: it says the watch is in place, so a caller knows
// that changes from then on are seen.
type WatchEvent struct {
	Op string `json:"op,omitempty"`
	// Name is the changed entry's path relative to the watched directory.
	Name string `json:"name,omitempty"`
}

// OpError is a file operation the sandbox refused or could not perform.
type OpError struct{ Exit Exit }

func (e *OpError) Error() string { return e.Exit.Error }

// kindClasses gives the error kinds of file operations their classes.
var kindClasses = map[string]error{
	KindNotFound: errdefs.ErrNotFound,
	KindExists:   errdefs.ErrAlreadyExists,
	KindInvalid:  errdefs.ErrInvalid,
	KindRefused:  errdefs.ErrUnavailable,
}

// Is matches the class of the refusal's kind, so that a missing path is
// errdefs.ErrNotFound.
func (e *OpError) Is(target error) bool {
	c, ok := kindClasses[e.Exit.Kind]
	return ok && target == c
}

// ErrorKind returns the Kind of an operation the sandbox refused ("" for
// any other error), so callers can tell a missing file from a broken
// channel.
func ErrorKind(err error) string {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Exit.Kind
	}
	return ""
}
