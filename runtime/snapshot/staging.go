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
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Inside a staging directory: the creator's pid file, which it keeps
// flocked while it lives, and the directory the checkpoint goes into.
const (
	pidName   = "pid"
	filesName = "files"
)

// Staging is a snapshot being written: the backend writes the checkpoint
// files into Dir, then Commit stores them or Abort drops them. A Staging
// is used by one goroutine.
type Staging struct {
	s    *Store
	root string   // <dataDir>/snapshots/.staging-*
	pid  *os.File // flocked for the staging's life, so GC leaves it alone
	done bool
}

// Begin starts a snapshot in a fresh staging directory on the store's
// filesystem, so that Commit is a rename.
func (s *Store) Begin(ctx context.Context) (*Staging, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	root, err := os.MkdirTemp(s.dir, stagingPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	g := &Staging{s: s, root: root}
	if g.pid, err = lockPid(root); err == nil {
		err = os.Mkdir(g.Dir(), 0o700)
	}
	if err != nil {
		g.Abort()
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return g, nil
}

// lockPid writes the pid file of a staging directory and keeps it locked.
// The file gets its name only once locked: GC never sees it unlocked while
// its creator lives.
func lockPid(root string) (*os.File, error) {
	tmp := filepath.Join(root, pidName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		if _, err = fmt.Fprintf(f, "%d\n", os.Getpid()); err == nil {
			err = os.Rename(tmp, filepath.Join(root, pidName))
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// abandoned reports whether the process that began the staging directory
// dir is gone. A directory without a pid file is from a creator that died
// right after making it, or one still setting it up: only old ones count.
func abandoned(dir string, now time.Time) bool {
	f, err := os.Open(filepath.Join(dir, pidName))
	if errors.Is(err, fs.ErrNotExist) {
		fi, err := os.Stat(dir)
		return err == nil && now.Sub(fi.ModTime()) > time.Minute
	}
	if err != nil {
		return false
	}
	defer f.Close()
	// The kernel drops the creator's lock when it exits, whatever its pid
	// has been reused for since.
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// Dir is where the checkpoint files go.
func (g *Staging) Dir() string { return filepath.Join(g.root, filesName) }

// Abort removes the staging directory. It does nothing after Commit.
func (g *Staging) Abort() {
	if g.done {
		return
	}
	g.done = true
	os.RemoveAll(g.root) // what is left, GC removes once the lock is gone
	if g.pid != nil {
		g.pid.Close()
	}
}

// Commit stores the files in Dir as a snapshot. It hashes and fsyncs every
// file, then moves the directory into the store and registers it in one
// step. Content already stored is not stored twice: the existing snapshot
// is returned, with name added to its names. A name another snapshot has is
// ErrNameInUse. Commit ends the staging, also on error: a failed Commit
// leaves nothing behind.
func (g *Staging) Commit(ctx context.Context, name, imageID string, lin sandbox.Lineage, meta any) (*sandbox.Snapshot, error) {
	if g.done {
		return nil, errors.New("commit snapshot: the staging was already committed or aborted")
	}
	defer g.Abort()
	snap, err := g.commit(ctx, name, imageID, lin, meta)
	if err != nil {
		return nil, fmt.Errorf("commit snapshot: %w", err)
	}
	return snap, nil
}

func (g *Staging) commit(ctx context.Context, name, imageID string, lin sandbox.Lineage, meta any) (*sandbox.Snapshot, error) {
	if name != "" {
		if err := checkName(name); err != nil {
			return nil, err
		}
	}
	metaJSON := []byte{}
	if meta != nil {
		var err error
		if metaJSON, err = json.Marshal(meta); err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
	}
	files, err := hashTree(ctx, g.Dir())
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("the checkpoint has no files")
	}
	filesJSON, err := json.Marshal(files)
	if err != nil {
		return nil, err
	}
	var size int64
	for _, f := range files {
		size += f.Size
	}
	id := digest(files)
	now := store.Now().UnixMilli()

	unlock, err := g.s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	target, err := g.s.path(id)
	if err != nil {
		return nil, err
	}
	renamed := false
	err = g.s.st.Tx(ctx, func(tx *sql.Tx) error {
		if name != "" {
			var owner string
			err := tx.QueryRowContext(ctx, `SELECT snapshot_id FROM snapshot_names WHERE name = ?`, name).Scan(&owner)
			if err == nil && owner != id {
				if _, scoped := tenant.Of(ctx); scoped {
					return fmt.Errorf("%w: %s", ErrNameInUse, name) // perhaps another tenant's: say no more
				}
				return fmt.Errorf("%w: %s is snapshot %s", ErrNameInUse, name, shortID(owner))
			}
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM snapshots WHERE id = ?)`, id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			_, err := tx.ExecContext(ctx, `INSERT INTO snapshots(id, sandbox, sandbox_name, parent, image_id, created, size, files, meta, tenant)
				VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				id, lin.Sandbox, lin.SandboxName, lin.Parent, imageID, now, size, string(filesJSON), string(metaJSON), tenant.Owner(ctx))
			if err != nil {
				return err
			}
		}
		if name != "" {
			_, err := tx.ExecContext(ctx, `INSERT INTO snapshot_names(name, snapshot_id, created) VALUES(?, ?, ?)
				ON CONFLICT(name) DO NOTHING`, name, id, now)
			if err != nil {
				return err
			}
		}
		if exists {
			return nil // the duplicate goes with the staging
		}
		// Under the lock, a directory without a row is garbage from a
		// crashed Commit or Remove.
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.Rename(g.Dir(), target); err != nil {
			return err
		}
		renamed = true
		// The rename must be durable before the row is.
		return syncDir(g.s.dir)
	})
	if err != nil {
		if renamed {
			os.RemoveAll(target) // it has no row
		}
		return nil, err
	}
	return g.s.load(ctx, id)
}

// hashTree hashes and fsyncs every file under dir, reading each once, and
// fsyncs the directories, so that their content is durable before the
// rename that publishes them. Files are sorted by name.
func hashTree(ctx context.Context, dir string) ([]sandbox.File, error) {
	var files []sandbox.File
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", rel)
		}
		if strings.Contains(rel, "\n") {
			return fmt.Errorf("%q: file name has a newline", rel)
		}
		f, err := hashFile(p, buf)
		if err != nil {
			return err
		}
		f.Name = rel
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// WalkDir's order puts "a/b" before "a.b"; the digest wants byte order.
	slices.SortFunc(files, func(a, b sandbox.File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

func hashFile(path string, buf []byte) (sandbox.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return sandbox.File{}, err
	}
	defer fh.Close()
	sum, crc := sha256.New(), crc32.New(crcTable)
	n, err := io.CopyBuffer(io.MultiWriter(sum, crc), fh, buf)
	if err != nil {
		return sandbox.File{}, fmt.Errorf("hash %s: %w", path, err)
	}
	if err := fh.Sync(); err != nil {
		return sandbox.File{}, fmt.Errorf("sync %s: %w", path, err)
	}
	return sandbox.File{Size: n, SHA256: hex.EncodeToString(sum.Sum(nil)), CRC32C: crc.Sum32()}, nil
}

// digest is the snapshot ID of files sorted by name: the SHA-256 of their
// sha256sum listing.
func digest(files []sandbox.File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s  %s\n", f.SHA256, f.Name)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
