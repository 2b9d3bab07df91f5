package sandbox

import (
	"context"

	"smolvm.dev/smolvm/store"
)

// SnapshotInUse reports whether a sandbox depends on the snapshot with this
// ID, so that snapshot rm does not delete what a sandbox was restored from.
// No sandbox is restored from a snapshot yet: the restore work fills this in.
func SnapshotInUse(ctx context.Context, st *store.Store, snapshotID string) (bool, error) {
	return false, nil
}
