package sandbox

import (
	"context"
	"io"
	"net"
	"time"
)

// The capabilities below are what the servers (server/httpapi,
// server/e2b) need of a runtime beyond Service. Each is small so that a
// runtime elsewhere (a cluster: lifecycle through its objects, each
// sandbox's data plane forwarded to the node that holds it) can offer the
// same ones; the local runtime (runtime/manager with its image, snapshot
// and tenant stores) implements them all, and tests/fakeruntime too.
// Errors wrap this package's sentinels or carry an errdefs class, as
// Service's do. A server that needs more of the runtime gets it through
// one of these (the fake's assertion then fails the build until it has it
// too), and matches this package's sentinels, never a runtime package's.

// Files hands out a running sandbox's file system.
type Files interface {
	// FS returns the file system of the running sandbox ref. It runs no
	// command: those go through Exec.
	FS(ctx context.Context, ref string) (FS, error)
}

// Archives move whole trees in and out of a running sandbox as tar
// streams (the format of internal/archive), with cp semantics.
type Archives interface {
	// PutArchive extracts the tar stream r at dst inside the sandbox; no
	// entry may write outside dst's directory.
	PutArchive(ctx context.Context, ref, dst string, r io.Reader) error
	// GetArchive writes src from inside the sandbox to w as a tar stream.
	GetArchive(ctx context.Context, ref, src string, w io.Writer) error
}

// Ports reach TCP ports inside sandboxes.
type Ports interface {
	// DialPort connects to port inside the running sandbox ref, through
	// the sandbox itself (no published port needed).
	DialPort(ctx context.Context, ref string, port int) (net.Conn, error)
	// DialPublished connects to addr ("host:port"), one of the ports
	// sandboxes publish on this host, and nothing else.
	DialPublished(ctx context.Context, network, addr string) (net.Conn, error)
}

// Pools keep sandboxes ready to claim (see Pool); Service.RemovePool
// removes one.
type Pools interface {
	CreatePool(ctx context.Context, o PoolOptions) (*Pool, error)
	Pool(ctx context.Context, name string) (*Pool, error)
	Pools(ctx context.Context) ([]*Pool, error)
	// FillPool makes a pool's missing members now, up to its memory
	// budget (ErrPoolBudget), and returns how many it made.
	FillPool(ctx context.Context, name string) (int, error)
}

// Events are the sandboxes' lifecycle changes, and whatever else a layer
// above publishes among them (agent runs' progress).
type Events interface {
	// Subscribe returns a channel of the events from now on of the
	// sandboxes ctx's tenant owns, and a function that ends the
	// subscription. The channel is closed when the subscription ends, or
	// when the subscriber fell too far behind: it never slows the runtime.
	Subscribe(ctx context.Context) (<-chan Event, func())
	Publish(ctx context.Context, e Event)
}

// Accounting measures what each tenant's sandboxes use.
type Accounting interface {
	// Account records the usage of running sandboxes up to now; a server
	// calls it periodically.
	Account(ctx context.Context) error
	// Usage sums the usage recorded since (zero: since records began) of
	// ctx's tenant, or unscoped of every tenant (of only, if set), grouped
	// by one of the Usage* groupings.
	Usage(ctx context.Context, since time.Time, only, by string) ([]Usage, error)
}

// Reaper removes what has expired.
type Reaper interface {
	// Reap removes sandboxes expired for longer than grace and returns
	// their names; a server calls it periodically.
	Reap(ctx context.Context, grace time.Duration) ([]string, error)
}

// SnapshotUsers tells whether a snapshot still has users.
type SnapshotUsers interface {
	// SnapshotInUse reports whether a sandbox still rests on the snapshot
	// with ID id, so that it may not be removed.
	SnapshotInUse(ctx context.Context, id string) (bool, error)
}

// Tenancy gives the tenants of a runtime.
type Tenancy interface {
	Tenants() Tenants
}

// Tenants are the tenants of a runtime and their API keys, which are
// stored only as hashes.
type Tenants interface {
	Add(ctx context.Context, name string, q Quota) (*Tenant, error)
	// Remove deletes a tenant and revokes its keys; what it owns stays,
	// the admin's to see.
	Remove(ctx context.Context, name string) error
	Get(ctx context.Context, name string) (*Tenant, error)
	List(ctx context.Context) ([]*Tenant, error)
	SetQuota(ctx context.Context, name string, q Quota) (*Tenant, error)
	// AddKey makes a new API key of the tenant and returns it with its
	// secret, which is shown only this once.
	AddKey(ctx context.Context, name string) (TenantKey, string, error)
	RemoveKey(ctx context.Context, name, id string) error
	// Resolve returns the tenant whose key secret is, or false.
	Resolve(ctx context.Context, secret string) (string, bool)
}

// Images is a store of images.
type Images interface {
	Get(ctx context.Context, nameOrID string) (*Image, error)
	List(ctx context.Context) ([]Image, error)
	// Pull fetches ref from its registry, unless it is here already.
	Pull(ctx context.Context, ref string, o PullOptions) (*Image, error)
}

// Snapshots is a store of snapshots.
type Snapshots interface {
	Get(ctx context.Context, nameOrID string) (*Snapshot, error)
	List(ctx context.Context) ([]Snapshot, error)
	// Remove deletes a snapshot unless inUse (SnapshotUsers.SnapshotInUse)
	// says that something still rests on it.
	Remove(ctx context.Context, nameOrID string, inUse func(id string) (bool, error)) error
	// Export writes a durable snapshot to w as a tar stream that Import
	// reads back, with the same ID and digest.
	Export(ctx context.Context, snap *Snapshot, w io.Writer) error
	// Import reads an exported snapshot from r and names it name (""
	// for none); copied is false when it was here already.
	Import(ctx context.Context, r io.Reader, name string) (snap *Snapshot, copied bool, err error)
}

// Runtime is everything smolvm's native API serves (server/httpapi).
type Runtime interface {
	Service
	Files
	Archives
	Ports
	Pools
	Events
	Accounting
	Reaper
	SnapshotUsers
	Tenancy
	Templates
	VolumeService
}

// Templates are images plus, optionally, a started state (Template).
type Templates interface {
	// BuildTemplate makes (or replaces) a template of ctx's tenant; with
	// a start command, once it is ready and checkpointed.
	BuildTemplate(ctx context.Context, o TemplateOptions) (*Template, error)
	// TagTemplate makes (or replaces) to, a copy of from under another
	// name (the same build).
	TagTemplate(ctx context.Context, from, to string) (*Template, error)
	// Template returns the template name as ctx's tenant sees it: its
	// own, else a public one.
	Template(ctx context.Context, name string) (*Template, error)
	Templates(ctx context.Context) ([]*Template, error)
	RemoveTemplate(ctx context.Context, name string) error
}
