// Package sandbox is the sandbox service contract: the types, the Service
// interface and the errors shared by every implementation and client.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Service runs sandboxes. The local manager (runtime/manager) implements it
// on this host, and the Go client (client) implements it against a smolvm
// server; both give the same results, errors and messages, so a caller
// such as the CLI works the same either way (TestCLIRemoteMatchesDirect).
// Errors wrap this package's sentinels, each of which belongs to an error
// class.
type Service interface {
	Create(ctx context.Context, o CreateOptions) (*Sandbox, error)
	Start(ctx context.Context, ref string) (*Sandbox, error)
	// Stop sends SIGTERM, then SIGKILL after grace.
	Stop(ctx context.Context, ref string, grace time.Duration) (*Sandbox, error)
	// Remove deletes a sandbox; a running one needs force.
	Remove(ctx context.Context, ref string, force bool) error
	Get(ctx context.Context, ref string) (*Sandbox, error)
	List(ctx context.Context) ([]*Sandbox, error)
	// SetTTL gives a sandbox a new time to live from now; 0 is none.
	SetTTL(ctx context.Context, ref string, ttl time.Duration) (*Sandbox, error)
	Stats(ctx context.Context, ref string) (*Stats, error)

	// Exec runs p in a running sandbox. A command that cannot start is an
	// Exit with Kind set, not an error.
	Exec(ctx context.Context, ref string, p Process, stdio Stdio) (Exit, error)
	// CopyIn copies the caller's path src to dst inside the sandbox, and
	// CopyOut the other way, with cp semantics.
	CopyIn(ctx context.Context, ref, src, dst string) error
	CopyOut(ctx context.Context, ref, src, dst string) error
	// ReadFile streams one regular file out of the sandbox; the caller
	// closes it. WriteFile creates or replaces one, making its parents.
	ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, ref, path string, r io.Reader) error
	// Logs writes the main process's output to o's writers.
	Logs(ctx context.Context, ref string, o LogOptions) error

	Checkpoint(ctx context.Context, ref string, o CheckpointOptions) (*Snapshot, error)
	Restore(ctx context.Context, snapshot string, o RestoreOptions) (*Sandbox, error)
	Fork(ctx context.Context, ref string, o ForkOptions) ([]*Sandbox, error)
	Pause(ctx context.Context, ref string) (*Sandbox, error)
	Resume(ctx context.Context, ref string) (*Sandbox, error)
	RemovePool(ctx context.Context, name string) error

	NetStatus(ctx context.Context, ref string) (*NetworkState, error)
	NetEvents(ctx context.Context, ref string) ([]NetworkEvent, error)
	NetUpdate(ctx context.Context, ref string, n Network) (*Sandbox, error)
}

// Event is one lifecycle change of a sandbox, as this Manager made or
// observed it. Changes made by another process sharing the data dir show
// up once this Manager reads the sandbox again.
type Event struct {
	// Type is what happened: "created", "started", "stopped", "expired",
	// "removed", "ttl" (time to live changed), or a state a sandbox was
	// found in ("paused", "running").
	Type      string     `json:"type"`
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	State     State      `json:"state,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Time      time.Time  `json:"time"`
	// Data carries the details of events that are not a sandbox's
	// (Type "agent.*": ID is an agent run's, Data its progress).
	Data json.RawMessage `json:"data,omitempty"`
}

// MaxCopyOut bounds what a copy out of a sandbox may write on the host, so
// a hostile sandbox cannot fill the host's disk through cp.
const MaxCopyOut = 8 << 30

// LogOptions select what Logs prints.
type LogOptions struct {
	Follow bool
	Stdout io.Writer
	Stderr io.Writer
}

// ExpiredError is the answer to a lookup of a sandbox that expired.
type ExpiredError struct {
	ID, Name string
	// At is when it expired; Reason says why ("time to live (15m0s) ended").
	At     time.Time
	Reason string
	// Sandbox is the record while it is still listed; nil once removed.
	Sandbox *Sandbox
}

func (e *ExpiredError) Error() string {
	msg := fmt.Sprintf("sandbox %q expired at %s: %s", e.Name, e.At.UTC().Format(time.RFC3339), e.Reason)
	if e.Sandbox == nil {
		msg += " (since removed)"
	}
	return msg
}

// Is makes errors.Is(err, ErrExpired) match, and ErrExpired's class.
func (e *ExpiredError) Is(target error) bool { return errors.Is(ErrExpired, target) }

// CreateOptions describe a new sandbox.
type CreateOptions struct {
	Name   string
	Image  string // empty: the builtin host image, or the pool's
	Config Config
	Start  bool
	// Pool takes a ready sandbox from this pool (see CreatePool), which
	// skips every cold step; it implies Start.
	Pool string
	// Backend runs the sandbox; empty: the default one, or the pool's.
	Backend string
}

// StartError is a sandbox whose main command could not be started.
type StartError struct{ Exit Exit }

func (e *StartError) Error() string {
	return fmt.Sprintf("main command: %s (exit %d)", e.Exit.Error, e.Exit.Code)
}

// Pool keeps sandboxes of one image and one set of limits ready. Started
// members make creating a sandbox skip every cold step: the sandbox is
// already booted, and only takes on its new name and identity. Created,
// never started members (restore targets) do the same for restores and
// forks of sandboxes of that image and those limits: the copy is restored
// into one, which leaves only the restore itself.
type Pool struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	Size  int    `json:"size"`
	// Targets is how many restore targets to keep.
	Targets int `json:"targets"`
	// MemoryBudget caps the memory the waiting sandboxes use together.
	MemoryBudget int64     `json:"memory_budget"`
	Limits       Limits    `json:"limits"`
	CreatedAt    time.Time `json:"created_at"`
	// Ready counts the started sandboxes waiting, TargetsReady the
	// restore targets; MemoryUsed is what they all use.
	Ready        int   `json:"ready"`
	TargetsReady int   `json:"targets_ready"`
	MemoryUsed   int64 `json:"memory_used"`
	// Snapshot is the ID of the snapshot a hot pool holds Hot copies
	// of, restored and paused; HotReady counts those waiting.
	Snapshot string `json:"snapshot,omitempty"`
	Hot      int    `json:"hot"`
	HotReady int    `json:"hot_ready"`
	// Tenant owns the pool; "" is the admin.
	Tenant string `json:"tenant,omitempty"`
	// Backend runs the pool's sandboxes.
	Backend string `json:"backend,omitempty"`
}

// Pool bounds.
const (
	MaxPoolSize         = 64
	DefaultMemoryBudget = 4 << 30
)

// Errors callers match with errors.Is.
var (
	ErrPoolNotFound = errdefs.New(errdefs.ErrNotFound, "no such pool")
	ErrPoolBudget   = errdefs.New(errdefs.ErrQuota, "pool memory budget reached")
)

// PoolOptions describe a new pool.
type PoolOptions struct {
	Name         string // default: the image reference, if it is a valid name
	Image        string // default: the builtin host image
	Size         int    // started sandboxes
	Targets      int    // restore targets for restores and forks
	MemoryBudget int64  // 0: DefaultMemoryBudget
	Limits       Limits
	// Backend runs the pool's sandboxes (default: the host's default); a
	// restore or fork takes targets only from a pool of its snapshot's
	// backend.
	Backend string
	// From names a snapshot; the pool then holds Hot copies already
	// restored from it, paused, which restores of it claim. Its image,
	// limits and network policy (each copy its own network, published
	// ports included) are the snapshot's.
	From string
	Hot  int
}

// MaxFork bounds one fork: each copy is a whole sandbox.
const MaxFork = 64

// ErrUnsupported is returned when the backend cannot snapshot.
var ErrUnsupported = errdefs.New(errdefs.ErrUnsupported, "not supported by this backend")

// CheckpointOptions describe a checkpoint.
type CheckpointOptions struct {
	Name string // snapshot name, "" for none
	Stop bool   // stop the sandbox once saved; by default it keeps running
}

// RestoreOptions describe a restore.
type RestoreOptions struct {
	Name string // name of the new sandbox, "" for a generated one
	// TTL, above 0, replaces the snapshot's time to live: the copy starts
	// with its deadline, so no SetTTL call follows on the critical path.
	TTL time.Duration
	// Labels, when not nil, replace the snapshot's labels: the copy is
	// tagged as its maker asks (E2B's metadata of a sandbox made from a
	// snapshot), not as its source was.
	Labels map[string]string
}

// ForkOptions describe a fork.
type ForkOptions struct {
	N int // copies, 1 to MaxFork
	// NamePrefix names the copies P-1 … P-N; "" gives generated names.
	NamePrefix string
}
