// Package snapshot stores sandbox checkpoints on disk, with their content digests and lineage.
package snapshot

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Errors callers test with errors.Is; they are always wrapped with detail.
var (
	ErrNotFound    = sandbox.ErrSnapshotNotFound
	ErrCorrupt     = errdefs.New(errdefs.ErrCorrupt, "corrupt snapshot")
	ErrInUse       = errdefs.New(errdefs.ErrConflict, "snapshot in use")
	ErrNameInUse   = sandbox.ErrSnapshotNameInUse
	ErrInvalidName = sandbox.ErrInvalidSnapshotName
)

// Store is the snapshot store of one data directory. It is safe for
// concurrent use, also by several processes sharing the data directory.
type Store struct {
	st    *store.Store
	dir   string         // <dataDir>/snapshots
	seals sync.WaitGroup // snapshots committed and not yet sealed
	// mu guards running, the stagings whose seal runs in this process,
	// and their handedOff.
	mu      sync.Mutex
	running map[*Staging]bool
	// beforeSeal, if set, runs as each seal starts (tests).
	beforeSeal func()
	// scratch holds this data dir's checkpoints that are never
	// committed, on /dev/shm; "" if that is no tmpfs.
	scratch string
}

var schema = []string{
	`CREATE TABLE snapshots (
		id           TEXT PRIMARY KEY,
		sandbox      TEXT NOT NULL,
		sandbox_name TEXT NOT NULL,
		parent       TEXT NOT NULL,
		image_id     TEXT NOT NULL,
		created      INTEGER NOT NULL,
		size         INTEGER NOT NULL,
		files        TEXT NOT NULL,
		meta         TEXT NOT NULL
	)`,
	`CREATE TABLE snapshot_names (
		name        TEXT PRIMARY KEY,
		snapshot_id TEXT NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
		created     INTEGER NOT NULL
	)`,
	`CREATE INDEX snapshot_names_snapshot_id ON snapshot_names(snapshot_id)`,
	// Snapshots before these columns were hashed and fsynced at commit,
	// and their ID was their digest. sealer is the staging directory
	// whose locked pid file says a live process is sealing the row.
	`ALTER TABLE snapshots ADD COLUMN digest TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN durable INTEGER NOT NULL DEFAULT 1`,
	`ALTER TABLE snapshots ADD COLUMN sealer TEXT NOT NULL DEFAULT ''`,
	`UPDATE snapshots SET digest = id`,
	// The tenant (runtime/tenant) that owns a snapshot; '' is the admin's.
	`ALTER TABLE snapshots ADD COLUMN tenant TEXT NOT NULL DEFAULT ''`,
}

const (
	lockName      = ".lock"
	stagingPrefix = ".staging-"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli) // hardware-accelerated on amd64 and arm64

// Open opens the snapshot store in dataDir, registering its tables in st.
func Open(ctx context.Context, dataDir string, st *store.Store) (*Store, error) {
	s := &Store{st: st, dir: filepath.Join(dataDir, "snapshots")}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	s.scratch = scratchDir(s.dir)
	if err := st.Migrate(ctx, "snapshot", schema); err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	return s, nil
}

// Wait waits until every snapshot this Store committed is sealed (durable,
// or failed to be). Close the database only after it.
func (s *Store) Wait() { s.seals.Wait() }

// shm is where scratch checkpoints go when it is a tmpfs.
const shm = "/dev/shm"

// scratchDir is the scratch directory of the store in dir: one per data
// dir, so that GC sweeps only its own.
func scratchDir(dir string) string {
	var sfs unix.Statfs_t
	if err := unix.Statfs(shm, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(shm, "smolvm-scratch-"+hex.EncodeToString(sum[:6]))
}

// lock serializes the steps that make a snapshot directory and its row
// agree (Commit's rename and insert, Remove, GC) across processes. flock
// is released by the kernel when a process dies, so a crash never leaves
// the store locked.
func (s *Store) lock() (unlock func(), err error) {
	unlock, err = flock.Lock(filepath.Join(s.dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("lock snapshots: %w", err)
	}
	return unlock, nil
}

// path is the directory of a committed snapshot; it is always inside the
// store's directory.
func (s *Store) path(id string) (string, error) {
	return names.Join(s.dir, strings.TrimPrefix(id, "sha256:"))
}

var (
	hexDir    = lazyre.New(`^[0-9a-f]{64}$`)
	idPattern = lazyre.New(`^(sha256:)?[0-9a-f]{6,64}$`)
)

// checkRef checks a snapshot name or ID given by a user (names.Snapshot).
func checkRef(nameOrID string) error {
	if err := names.Check(names.Snapshot, nameOrID); err != nil {
		return nameError{err}
	}
	return nil
}

// checkName rejects names that could not be typed on a command line or
// that would shadow an ID prefix.
func checkName(name string) error {
	if err := checkRef(name); err != nil {
		return err
	}
	if idPattern().MatchString(name) {
		return nameError{fmt.Errorf("%w: snapshot name %q: it looks like a snapshot ID", names.ErrInvalid, name)}
	}
	return nil
}

// nameError is a bad snapshot name: it matches ErrInvalidName as well as
// names.ErrInvalid.
type nameError struct{ error }

func (e nameError) Is(target error) bool { return target == ErrInvalidName }
func (e nameError) Unwrap() error        { return e.error }

// Get finds a snapshot by name, full ID, or unique ID prefix of at least 6
// hex digits.
func (s *Store) Get(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error) {
	id, err := s.resolve(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	return s.load(ctx, id)
}

func (s *Store) resolve(ctx context.Context, nameOrID string) (string, error) {
	if err := checkRef(nameOrID); err != nil {
		return "", err
	}
	db := s.st.DB()
	owner, scoped := tenant.Of(ctx)
	var id string
	err := db.QueryRowContext(ctx, `SELECT n.snapshot_id FROM snapshot_names n JOIN snapshots s ON s.id = n.snapshot_id
		WHERE n.name = ? AND (NOT ? OR s.tenant = ?)`, nameOrID, scoped, owner).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("get snapshot %s: %w", nameOrID, err)
	}
	if !idPattern().MatchString(nameOrID) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, nameOrID)
	}
	// IDs are hex; those of snapshots made before digests were separate
	// are "sha256:" and their digest.
	h := strings.TrimPrefix(nameOrID, "sha256:")
	ids, err := store.Strings(ctx, db, `SELECT id FROM snapshots WHERE (substr(id, 1, ?) = ? OR substr(id, 1, ?) = ?) AND (NOT ? OR tenant = ?) LIMIT 2`,
		len(h), h, len(h)+7, "sha256:"+h, scoped, owner)
	if err != nil {
		return "", fmt.Errorf("get snapshot %s: %w", nameOrID, err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%w: %s", ErrNotFound, nameOrID)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("get snapshot %s: the ID prefix matches several snapshots: give more digits", nameOrID)
}

// load reads one snapshot row with its names, if ctx's tenant owns it.
func (s *Store) load(ctx context.Context, id string) (*sandbox.Snapshot, error) {
	db := s.st.DB()
	snap := &sandbox.Snapshot{ID: id}
	var created int64
	var files, meta, sealer string
	owner, scoped := tenant.Of(ctx)
	read := func() error {
		err := db.QueryRowContext(ctx, `SELECT sandbox, sandbox_name, parent, image_id, created, size, files, meta, digest, durable, sealer, tenant FROM snapshots WHERE id = ? AND (NOT ? OR tenant = ?)`, id, scoped, owner).
			Scan(&snap.Lineage.Sandbox, &snap.Lineage.SandboxName, &snap.Lineage.Parent, &snap.ImageID, &created, &snap.Size, &files, &meta,
				&snap.Digest, &snap.Durable, &sealer, &snap.Tenant)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("load snapshot %s: %w", id, err)
		}
		return nil
	}
	err := read()
	if err != nil {
		return nil, err
	}
	if !snap.Durable && !s.sealing(sealer) {
		// The seal marks the row durable before it drops its lock, so
		// the row read before the lock was seen gone may be stale.
		if err := read(); err != nil {
			return nil, err
		}
		if !snap.Durable {
			// Its process died before the files were durable: they may
			// be incomplete after a power loss. GC removes it.
			return nil, fmt.Errorf("%w: %s (lost before it was durable)", ErrNotFound, id)
		}
	}
	snap.Created = time.UnixMilli(created).UTC()
	if err := json.Unmarshal([]byte(files), &snap.Files); err != nil {
		return nil, fmt.Errorf("load snapshot %s files: %w", id, err)
	}
	if meta != "" {
		snap.Meta = json.RawMessage(meta)
	}
	if snap.Names, err = store.Strings(ctx, db, `SELECT name FROM snapshot_names WHERE snapshot_id = ? ORDER BY created, name`, id); err != nil {
		return nil, fmt.Errorf("load snapshot %s names: %w", id, err)
	}
	if len(snap.Names) > 0 {
		snap.Name = snap.Names[0]
	}
	return snap, nil
}

// List returns the snapshots of ctx's tenant (all, unscoped), newest
// first.
func (s *Store) List(ctx context.Context) ([]sandbox.Snapshot, error) {
	owner, scoped := tenant.Of(ctx)
	ids, err := store.Strings(ctx, s.st.DB(), `SELECT id FROM snapshots WHERE NOT ? OR tenant = ? ORDER BY created DESC, id`, scoped, owner)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := []sandbox.Snapshot{}
	for _, id := range ids {
		snap, err := s.load(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *snap)
	}
	return out, nil
}

// Bytes sums the sizes of owner's snapshots.
func (s *Store) Bytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	err := s.st.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM snapshots WHERE tenant = ?`, owner).Scan(&n)
	return n, err
}

// Verify checks that every file of snap is in place with its recorded size
// and CRC32C, and returns the snapshot's directory. It reads every byte but
// uses the hardware CRC rather than SHA-256, so it is cheap enough to run
// before each restore. A snapshot not yet sealed has no checksums: its
// files, just written by this host, are checked by size only.
func (s *Store) Verify(ctx context.Context, snap *sandbox.Snapshot) (string, error) {
	dir, err := s.path(snap.ID)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1<<20)
	for _, f := range snap.Files {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := verifyFile(filepath.Join(dir, filepath.FromSlash(f.Name)), f, buf); err != nil {
			return "", fmt.Errorf("%w: %s: %s: %w", ErrCorrupt, shortID(snap.ID), f.Name, err)
		}
	}
	return dir, nil
}

func verifyFile(path string, want sandbox.File, buf []byte) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != want.Size {
		return fmt.Errorf("size %d, want %d", fi.Size(), want.Size)
	}
	if want.SHA256 == "" {
		return nil // not sealed yet
	}
	crc := crc32.New(crcTable)
	if _, err := io.CopyBuffer(crc, fh, buf); err != nil {
		return err
	}
	if got := crc.Sum32(); got != want.CRC32C {
		return fmt.Errorf("crc32c %08x, want %08x", got, want.CRC32C)
	}
	return nil
}

// Remove deletes a snapshot given by ID, or by its only name; given one of
// several names, it removes just that name. inUse reports whether a
// sandbox depends on a snapshot (nil means none does); such a snapshot is
// kept and Remove returns ErrInUse.
func (s *Store) Remove(ctx context.Context, nameOrID string, inUse func(id string) (bool, error)) error {
	snap, err := s.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	if len(snap.Names) > 1 && snap.ID != nameOrID && slices.Contains(snap.Names, nameOrID) {
		if _, err := s.st.DB().ExecContext(ctx, `DELETE FROM snapshot_names WHERE name = ?`, nameOrID); err != nil {
			return fmt.Errorf("remove snapshot name %s: %w", nameOrID, err)
		}
		return nil
	}
	unlock, err := s.lock()
	if err != nil {
		return fmt.Errorf("remove snapshot %s: %w", nameOrID, err)
	}
	defer unlock()
	// Asked under the lock: a restore registers its sandbox before it
	// verifies the files, so either it sees the snapshot gone or this
	// sees its sandbox.
	if inUse != nil {
		used, err := inUse(snap.ID)
		if err != nil {
			return fmt.Errorf("remove snapshot %s: %w", nameOrID, err)
		}
		if used {
			return fmt.Errorf("remove snapshot %s: %w: a sandbox was restored from it", nameOrID, ErrInUse)
		}
	}
	// Row first: a crash in between leaves a directory without a row,
	// which GC removes, never a listed snapshot without files.
	if _, err := s.st.DB().ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, snap.ID); err != nil {
		return fmt.Errorf("remove snapshot %s: %w", nameOrID, err)
	}
	dir, err := s.path(snap.ID)
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("remove snapshot %s: %w", nameOrID, err)
	}
	return nil
}

// GC removes what crashed processes left behind: staging directories whose
// creator is gone, snapshots whose process died before sealing them, and
// snapshot directories without a row. It returns the paths it removed.
func (s *Store) GC(ctx context.Context) ([]string, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, fmt.Errorf("snapshot gc: %w", err)
	}
	defer unlock()
	lost, err := s.lost(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot gc: %w", err)
	}
	for _, id := range lost {
		if _, err := s.st.DB().ExecContext(ctx, `DELETE FROM snapshots WHERE id = ? AND durable = 0`, id); err != nil {
			return nil, fmt.Errorf("snapshot gc: %w", err)
		}
	}
	ids, err := store.Strings(ctx, s.st.DB(), `SELECT id FROM snapshots`)
	if err != nil {
		return nil, fmt.Errorf("snapshot gc: %w", err)
	}
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		known[strings.TrimPrefix(id, "sha256:")] = true
	}
	var removed []string
	if s.scratch != "" {
		scratch, err := os.ReadDir(s.scratch)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("snapshot gc: %w", err)
		}
		for _, e := range scratch {
			p := filepath.Join(s.scratch, e.Name())
			if !strings.HasPrefix(e.Name(), stagingPrefix) || !abandoned(p, time.Now()) {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return removed, fmt.Errorf("snapshot gc: %w", err)
			}
			removed = append(removed, p)
		}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot gc: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(s.dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), stagingPrefix):
			if !abandoned(p, time.Now()) {
				continue
			}
		case hexDir().MatchString(e.Name()):
			if known[e.Name()] {
				continue
			}
		default:
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, fmt.Errorf("snapshot gc: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// lost lists the snapshots not durable whose sealer is gone.
func (s *Store) lost(ctx context.Context) ([]string, error) {
	rows, err := s.st.DB().QueryContext(ctx, `SELECT id, sealer FROM snapshots WHERE durable = 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, sealer string
		if err := rows.Scan(&id, &sealer); err != nil {
			return nil, err
		}
		if !s.sealing(sealer) {
			out = append(out, id)
		}
	}
	return out, rows.Err()
}

// shortID is the 12-hex-digit form of an ID shown to users.
func shortID(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

var _ sandbox.Snapshots = (*Store)(nil)
