// Package sandbox manages sandbox lifecycles: durable records, images, and
// the backend that runs them.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"time"

	"smolvm.dev/smolvm/backend"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/network"
)

// State is a sandbox's lifecycle state as users see it.
type State string

const (
	// StateCreating marks a record whose creation is in progress; a
	// creating record whose creator died is an orphan for GC.
	StateCreating State = "creating"
	StateCreated  State = "created"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopped  State = "stopped"
	// StateExpired is a sandbox stopped by its time to live or idle
	// timeout. It stays listed for a grace period (see Reap) so that a
	// lookup says it expired, and when, rather than "no such sandbox".
	StateExpired State = "expired"
)

// Sandbox is the durable record of one sandbox.
type Sandbox struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Image   string `json:"image"`    // as the user named it
	ImageID string `json:"image_id"` // what it resolved to
	Backend string `json:"backend"`
	State   State  `json:"state"`
	Config  Config `json:"config"`

	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// ExpiresAt is when the sandbox's time to live ends, if it has one.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	// Reason says why a stopped sandbox stopped: "exited", "stopped",
	// "out of memory (limit …)", "killed", "checkpointed", and for an
	// expired one "time to live (…) ended" or "idle for …".
	Reason string `json:"reason,omitempty"`
	// Snapshot is the ID of the snapshot this sandbox was restored from.
	Snapshot string `json:"snapshot,omitempty"`
	// ForkedFrom is the ID of the sandbox this one is a fork of.
	ForkedFrom string `json:"forked_from,omitempty"`
}

// Config is what the user asked for at creation.
type Config struct {
	Cmd      []string       `json:"cmd,omitempty"`
	Env      []string       `json:"env,omitempty"`
	WorkDir  string         `json:"workdir,omitempty"`
	User     string         `json:"user,omitempty"`
	Hostname string         `json:"hostname"`
	Limits   backend.Limits `json:"limits"`
	// TTL is how long the sandbox may run after each start; 0 is forever.
	// SetTTL changes it, and the current deadline, later.
	TTL time.Duration `json:"ttl,omitempty"`
	// IdleTimeout stops the sandbox once no exec or file transfer has been
	// open for that long; 0 is none.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// OnExpiry is what the end of the TTL does: ExpiryStop (the default)
	// or ExpiryPause. Pausing needs a running `smolvm serve` (or smolvm
	// gc) to act; stopping is enforced inside the sandbox.
	OnExpiry string `json:"on_expiry,omitempty"`
	// Policy is a repository root whose .smolvm/policy.toml governs every
	// command run in the sandbox, checked before it starts.
	Policy string `json:"policy,omitempty"`
	// Network is what the sandbox may reach; nil is mode none.
	Network *network.Policy `json:"network,omitempty"`
}

// What the end of a TTL does (Config.OnExpiry).
const (
	ExpiryStop  = "stop"
	ExpiryPause = "pause"
)

// DefaultImage is the builtin image: the host's /usr under a synthetic /etc.
const DefaultImage = "host"

// Defaults and bounds for limits. A limit below the minimum cannot boot a
// sandbox, so it is refused up front rather than failing obscurely.
const (
	DefaultCPUs   = 1.0
	DefaultMemory = 1 << 30
	DefaultPids   = 1024
	DefaultDisk   = 2 << 30

	MinMemory = 64 << 20
	MinPids   = 16
	MinDisk   = 16 << 20
	MaxPids   = 1 << 20

	// DefaultTTL is the time to live the CLI and the API give a sandbox
	// unless told otherwise, so a forgotten sandbox does not run forever.
	// The Manager itself takes 0 as "none".
	DefaultTTL = 15 * time.Minute
	// DefaultExpiredGrace is how long an expired sandbox stays listed.
	DefaultExpiredGrace = time.Hour
)

// Errors callers match with errors.Is.
var (
	ErrNotFound  = errors.New("no such sandbox")
	ErrNameInUse = errors.New("name already in use")
	ErrState     = errors.New("wrong state")
	ErrInvalid   = names.ErrInvalid
	ErrOrphan    = errors.New("orphaned by a crashed create")
	// ErrExpired matches an *ExpiredError.
	ErrExpired    = errors.New("sandbox expired")
	ErrNotRunning = backend.ErrNotRunning
)

// validate fills defaults and checks bounds.
func (c *Config) validate() error {
	l := &c.Limits
	switch {
	case l.CPUs < 0:
		return fmt.Errorf("%w: --cpus %g: must be positive", ErrInvalid, l.CPUs)
	case l.CPUs == 0:
		l.CPUs = DefaultCPUs
	case l.CPUs > float64(runtime.NumCPU()):
		return fmt.Errorf("%w: --cpus %g: this host has %d CPUs", ErrInvalid, l.CPUs, runtime.NumCPU())
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	} else if l.Memory < MinMemory {
		return fmt.Errorf("%w: --memory %d bytes: at least %d MiB is needed", ErrInvalid, l.Memory, MinMemory>>20)
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	} else if l.Pids < MinPids || l.Pids > MaxPids {
		return fmt.Errorf("%w: --pids %d: must be between %d and %d", ErrInvalid, l.Pids, MinPids, MaxPids)
	}
	if l.Disk == 0 {
		l.Disk = DefaultDisk
	} else if l.Disk < MinDisk {
		return fmt.Errorf("%w: --disk %d bytes: at least %d MiB is needed", ErrInvalid, l.Disk, MinDisk>>20)
	}
	if c.TTL < 0 {
		return fmt.Errorf("%w: --timeout %s: must not be negative", ErrInvalid, c.TTL)
	}
	if c.OnExpiry != "" && c.OnExpiry != ExpiryStop && c.OnExpiry != ExpiryPause {
		return fmt.Errorf("%w: on expiry %q: want %q or %q", ErrInvalid, c.OnExpiry, ExpiryStop, ExpiryPause)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("%w: --idle-timeout %s: must not be negative", ErrInvalid, c.IdleTimeout)
	}
	if c.Network != nil {
		if err := c.Network.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !c.Network.Enabled() {
			c.Network = nil
		}
	}
	return nil
}

func validName(name string) error { return names.Check(names.Sandbox, name) }

// newID returns a random 12-hex-digit ID, short enough to type.
func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newMachineID returns a random /etc/machine-id: 32 lowercase hex digits.
func newMachineID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
