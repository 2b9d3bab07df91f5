package sandbox

import (
	"encoding/json"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Errors of snapshot stores, which callers match with errors.Is.
var (
	ErrSnapshotNotFound    = errdefs.New(errdefs.ErrNotFound, "snapshot not found")
	ErrSnapshotNameInUse   = errdefs.New(errdefs.ErrAlreadyExists, "snapshot name in use")
	ErrInvalidSnapshotName = errdefs.New(errdefs.ErrInvalid, "invalid snapshot name")
	// ErrSnapshotNotSealed is an export of a snapshot not yet durable.
	ErrSnapshotNotSealed = errdefs.New(errdefs.ErrConflict, "snapshot not sealed yet")
)

// File is one checkpoint file of a snapshot.
type File struct {
	Name   string `json:"name"` // slash-separated path inside the snapshot
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
	CRC32C uint32 `json:"crc32c"`
}

// Lineage says where a snapshot came from.
type Lineage struct {
	Sandbox     string `json:"sandbox"`
	SandboxName string `json:"sandbox_name"`
	Parent      string `json:"parent"` // snapshot ID the sandbox was itself restored from, "" if none
}

// Snapshot is a stored checkpoint.
type Snapshot struct {
	// ID is 64 hex digits given at checkpoint; snapshots made before
	// smolvm hashed in the background have their Digest as ID.
	ID string `json:"id"`
	// Digest is "sha256:<hex>", the digest of the sha256sum-style listing
	// ("<sha256>  <name>\n" per file, sorted by name): identical content
	// gives the same digest. It is "" until the snapshot is Durable.
	Digest string `json:"digest,omitempty"`
	// Durable is set once the content is hashed and synced to disk, in
	// the background after the checkpoint returns. A snapshot not yet
	// durable can be restored from; if smolvm dies first, it is lost.
	Durable bool            `json:"durable"`
	Name    string          `json:"name,omitempty"`  // the first name given, "" if none
	Names   []string        `json:"names,omitempty"` // every name, oldest first; unique among snapshots
	Lineage Lineage         `json:"lineage"`
	ImageID string          `json:"image_id"`
	Created time.Time       `json:"created"`
	Size    int64           `json:"size"` // bytes of its files
	Files   []File          `json:"files"`
	Meta    json.RawMessage `json:"meta,omitempty"` // opaque here: what the sandbox manager needs to restore
	// Tenant owns the snapshot; "" is the admin.
	Tenant string `json:"tenant,omitempty"`
}
