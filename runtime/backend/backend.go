// Package backend defines what an isolation backend must do to run a
// sandbox; each implementation lives in a subpackage.
package backend

import (
	"context"
	"io"
	"syscall"
	"time"

	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// Backend runs sandboxes. Implementations keep all per-sandbox state under
// Spec.Dir, so that a sandbox can be found again by a later process, and
// must be safe for concurrent use on different sandboxes.
//
// Checkpoint, restore, fork and pause are added by a later interface
// (Snapshotter) that backends able to do them also implement.
type Backend interface {
	// Name is the backend's short name, as shown to users ("gvisor").
	Name() string
	// Create prepares the sandbox without running anything in it.
	Create(ctx context.Context, spec *Spec) error
	// Start boots a created sandbox and returns once its agent answers,
	// or once its main process has ended, if that comes first.
	Start(ctx context.Context, spec *Spec) error
	// Run is Create and Start in one step, by the backend's fastest path.
	Run(ctx context.Context, spec *Spec) error
	// Restart boots a stopped sandbox again, as Start boots a created
	// one: its main process runs from the beginning, and MainExit and
	// MainLog are the new run's.
	Restart(ctx context.Context, spec *Spec) error
	// Exec runs a process in a running sandbox.
	Exec(ctx context.Context, spec *Spec, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error)
	// Guest returns a client for the sandbox's guest supervisor (files, pings).
	Guest(spec *Spec) *guest.Client
	// Signal sends sig to the sandbox's main process, or to every process.
	Signal(ctx context.Context, spec *Spec, sig syscall.Signal, all bool) error
	// Stats reports resource usage of a running sandbox.
	Stats(ctx context.Context, spec *Spec) (*sandbox.Stats, error)
	// State reports what is really running, independent of any record.
	State(ctx context.Context, spec *Spec) (Status, error)
	// MainExit reports how the main process ended, and when; nil while
	// it runs, or if it never started (a sandbox without one, or killed
	// from outside).
	MainExit(ctx context.Context, spec *Spec) (*Exit, error)
	// MainLog returns the main process's output: guest.LogEntry values
	// as JSON lines, oldest first. With follow, reads wait for more until
	// the sandbox stops or ctx ends, and then return io.EOF.
	MainLog(ctx context.Context, spec *Spec, follow bool) (io.ReadCloser, error)
	// Stop ends every process: SIGTERM, then SIGKILL after timeout.
	Stop(ctx context.Context, spec *Spec, timeout time.Duration) error
	// Delete releases everything Create and Start made. It is idempotent
	// and works on a half-created sandbox, which is how crashes are
	// cleaned up.
	Delete(ctx context.Context, spec *Spec) error
	// Sweep removes what the backend keeps outside sandbox directories
	// (gVisor's host cgroups) for the sandboxes gone says are gone, and
	// returns what it removed: a delete that failed half-way, or a crash,
	// leaves such things with no directory to find them by. They may be
	// shared by every smolvm on the host, so Sweep must still spare what
	// is live, for another data dir or a create under way.
	Sweep(ctx context.Context, gone func(id string) bool) ([]string, error)
}

// Snapshotter is implemented by backends that can save a running sandbox
// (memory, processes, open files and its writable layer) and bring it back.
type Snapshotter interface {
	// Checkpoint writes spec's state into dir. With o.LeaveRunning the
	// sandbox carries on unchanged afterwards; otherwise it is stopped.
	Checkpoint(ctx context.Context, spec *Spec, dir string, o CheckpointOptions) error
	// Restore starts spec, a new sandbox, in the state saved in dir, and
	// returns once it takes commands under spec's own identity (ID,
	// hostname, machine ID, environment). spec may have been made with
	// Create beforehand, so that only the restore itself remains.
	Restore(ctx context.Context, spec *Spec, dir string) error
	// Pause freezes every process; Resume thaws them.
	Pause(ctx context.Context, spec *Spec) error
	Resume(ctx context.Context, spec *Spec) error
}

// CheckpointOptions describe one checkpoint.
type CheckpointOptions struct {
	LeaveRunning bool
	// Saved, if set, is called once dir holds the whole image, before a
	// sandbox left running serves again: restores from dir may start
	// while the source is still resuming.
	Saved func()
}

// Spec is a sandbox as a backend sees it.
type Spec struct {
	ID       string
	Hostname string
	// Dir is a private directory for this sandbox; the backend may put
	// anything in it and Delete empties it.
	Dir string
	// Rootfs is what the sandbox sees as /.
	Rootfs Rootfs
	// Main is the sandbox's main process; nil keeps the sandbox idle
	// until stopped, ready for execs.
	Main    *sandbox.Process
	Env     []string
	WorkDir string // default working directory
	User    string // default user
	// Limits bound CPU, memory and processes; the disk limit a backend
	// applies is Rootfs.WritableSize.
	Limits sandbox.Limits
	// GuestBinary is the host path of the static smolvm-guest binary run
	// as the sandbox's PID 1.
	GuestBinary string
	// Deadline ends the sandbox: everything in it is killed then.
	Deadline *time.Time
	// IdleTimeout ends the sandbox once no exec or file transfer has been
	// open for that long; 0 is none.
	IdleTimeout time.Duration
	// MachineID is the sandbox's /etc/machine-id (32 hex digits).
	MachineID string
	// NetNS is the path of a network namespace whose interfaces (and their
	// addresses and routes) the sandbox takes as its own; the policy is
	// enforced outside it. Empty: no network but the sandbox's loopback.
	NetNS string `json:",omitempty"`
}

// Rootfs describes a sandbox's root filesystem: an image's read-only
// layers, host paths mounted read-only over them, and a writable layer on
// top, private to the sandbox. Each backend builds it its own way: gVisor
// stacks the layer directories with overlayfs; a VM backend can turn the
// layers into one disk image per image ID and give each sandbox an overlay
// disk of WritableSize.
type Rootfs struct {
	// ImageID names the layers: every Rootfs with this ID has the same
	// Layers, so what a backend builds from them it may cache by ID.
	ImageID string
	Layers  []Layer // lowest first
	Mounts  []Mount // mounted over the layers, read-only unless Writable
	// WritableSize caps the writable layer in bytes (0: no cap); a
	// sandbox that fills it gets ENOSPC, and the host disk is untouched.
	WritableSize int64
	// Upper, if set, is an empty host directory that takes the sandbox's
	// writes instead of its private writable layer: an overlayfs upper
	// layer (deletions are 0/0 character devices, replaced directories
	// carry trusted.overlay.opaque), which an image build reads as the
	// step's layer once the sandbox is gone. WritableSize does not apply.
	// A backend that cannot write through refuses it.
	Upper string `json:",omitempty"`
	// Host says the layers and mounts show the host's own directories
	// (the builtin host image): a backend that copies an image's files
	// refuses it before reading them.
	Host bool `json:",omitempty"`
}

// Layer is one read-only layer of an image.
type Layer struct {
	// Digest is the layer's content digest (its OCI diffID); empty for
	// content smolvm generates, such as the builtin image's root.
	Digest string `json:",omitempty"`
	// Dir is the host directory holding the layer's files.
	Dir string
}

// Mount is a bind mount from the host, read-only unless Writable.
type Mount struct {
	Source      string
	Destination string
	// Volume marks a named volume: a live directory that other sandboxes
	// and later ones share, so a backend must mount it, never copy it.
	Volume   bool `json:",omitempty"`
	Writable bool `json:",omitempty"`
}

// Exit is how a sandbox's main process ended.
type Exit struct {
	sandbox.Exit
	// At is when the guest recorded the exit.
	At time.Time
}

// Status is what a backend observes.
type Status string

const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
	StatusMissing Status = "missing" // nothing exists for this sandbox
)

// ErrNotRunning is returned for operations that need a running sandbox.
var ErrNotRunning = sandbox.ErrNotRunning
