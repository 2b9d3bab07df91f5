package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
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
	// Tenant owns the sandbox; "" is the admin (the server's own token,
	// or a local caller).
	Tenant string `json:"tenant,omitempty"`
}

// Config is what the user asked for at creation.
type Config struct {
	Cmd      []string `json:"cmd,omitempty"`
	Env      []string `json:"env,omitempty"`
	WorkDir  string   `json:"workdir,omitempty"`
	User     string   `json:"user,omitempty"`
	Hostname string   `json:"hostname"`
	Limits   Limits   `json:"limits"`
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
	// TrustRepo is a repository root whose trust policy
	// (.smolvm/policy.toml) governs every command run in the sandbox,
	// checked before it starts. The JSON name is the CLI's --policy.
	TrustRepo string `json:"policy,omitempty"`
	// Network is what the sandbox may reach; nil is mode none.
	Network *Network `json:"network,omitempty"`
	// Labels are the caller's key=value tags (E2B's metadata too); usage
	// can be broken down by them. Copies keep their source's.
	Labels map[string]string `json:"labels,omitempty"`
	// Volumes are the tenant's volumes mounted into the sandbox; copies
	// (restore, fork) mount the same volumes, not copies of them.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// LabelWarm on a sandbox names an HTTP endpoint inside it, PORT/PATH
// ("9222/json/version"). Each hot copy of its snapshots (a pool's --hot)
// is sent one GET there after its restore and before its pause: the first
// request a restored process serves faults in the memory and code that
// request touches, and a hot copy should pay that in the pool, not when
// it is claimed. Measured on browsers at load 25: Chromium's first
// /json/version after a hot claim took 0.35-2.5 s, later ones a fraction
// of that, and a copy asked once before its pause answered in 0.04-0.75 s.
// Not the cause: runsc's background page load (3-115 ms left after a
// fill) or the pause itself (3 s idle before the claim: no better).
const LabelWarm = "smolvm.warm"

// ParseWarm splits a LabelWarm value into its port and path.
func ParseWarm(v string) (port int, path string, err error) {
	p, rest, _ := strings.Cut(v, "/")
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || strings.ContainsAny(rest, " ?#") {
		return 0, "", fmt.Errorf("%w: label %s=%q: want PORT/PATH, e.g. 9222/json/version", ErrInvalid, LabelWarm, v)
	}
	return port, "/" + rest, nil
}

// Bounds of a sandbox's labels.
const (
	MaxLabels        = 32
	MaxLabelKeyLen   = 128
	MaxLabelValueLen = 512
)

// What the end of a TTL does (Config.OnExpiry).
const (
	ExpiryStop  = "stop"
	ExpiryPause = "pause"
)

// DefaultImage is the builtin image: the host's /usr under a synthetic /etc.
// Sandboxes that name no image run it until the base image is built
// (image.Store.Default).
const DefaultImage = "host"

// AgentPath is where the backends put the agent binary inside a sandbox
// (gVisor's spec, the microVM's init script); commands may run it again
// for its helpers (the guest's forward, which browser sandboxes use).
const AgentPath = "/.smolvm/agent"

// BaseImage is the base image's name (`smolvm image build base`): Debian
// with the usual tools, the default once built.
const BaseImage = "base"

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
	ErrNotFound  = errdefs.New(errdefs.ErrNotFound, "no such sandbox")
	ErrNameInUse = errdefs.New(errdefs.ErrAlreadyExists, "name already in use")
	ErrState     = errdefs.New(errdefs.ErrConflict, "wrong state")
	ErrInvalid   = errdefs.New(errdefs.ErrInvalid, "invalid argument")
	ErrOrphan    = errdefs.New(errdefs.ErrConflict, "orphaned by a crashed create")
	// ErrExpired matches an *ExpiredError.
	ErrExpired    = errdefs.New(errdefs.ErrNotFound, "sandbox expired")
	ErrNotRunning = errdefs.New(errdefs.ErrConflict, "sandbox is not running")
)
