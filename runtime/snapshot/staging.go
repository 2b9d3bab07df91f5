package snapshot

import (
	"context"
	"crypto/rand"
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

	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/store"
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
	// id, cancel and handedOff are set for a committed staging whose seal
	// runs in this process (HandOff).
	id        string
	cancel    context.CancelFunc
	handedOff bool
	// scratch is set for a checkpoint that is never committed (Scratch).
	scratch bool
}

// Begin starts a snapshot in a fresh staging directory on the store's
// filesystem, so that Commit is a rename.
func (s *Store) Begin(ctx context.Context) (*Staging, error) {
	return s.begin(ctx, s.dir)
}

// Scratch starts a checkpoint that is never committed, such as a fork's,
// which its copies restore from and which goes when they run. It lives on
// a tmpfs (/dev/shm) where there is one: no disk write, no sync. Its
// Commit fails; Abort drops it, and GC what a crash left.
func (s *Store) Scratch(ctx context.Context) (*Staging, error) {
	if s.scratch == "" {
		return s.Begin(ctx)
	}
	// The last scratch checkpoint to go removes the directory (release),
	// so it may vanish between MkdirAll and begin: try again once.
	var g *Staging
	var err error
	for range 2 {
		if err = os.MkdirAll(s.scratch, 0o700); err != nil {
			return nil, fmt.Errorf("begin scratch checkpoint: %w", err)
		}
		if g, err = s.begin(ctx, s.scratch); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	g.scratch = true
	return g, nil
}

func (s *Store) begin(ctx context.Context, parent string) (*Staging, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	root, err := os.MkdirTemp(parent, stagingPrefix+"*")
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

// sealing reports whether the staging directory named root in the store
// still belongs to a live process, which is sealing the snapshot whose
// row names it. Its pid file was in place before the row was written, so
// a missing one means the sealer is gone.
func (s *Store) sealing(root string) bool {
	return flock.Held(filepath.Join(s.dir, root, pidName))
}

// Dir is where the checkpoint files go.
func (g *Staging) Dir() string { return filepath.Join(g.root, filesName) }

// Abort removes the staging directory. It does nothing after Commit.
func (g *Staging) Abort() {
	if g.done {
		return
	}
	g.done = true
	g.release()
}

// Commit stores the files in Dir as a snapshot and returns it at once,
// not yet durable: the files are moved into the store and listed, and the
// snapshot can be restored from. Hashing its content and making it durable
// (one syncfs) go on in the background (Store.Wait waits for them); the
// snapshot then has its digest and Durable. Until then the staging's pid
// lock stays held: if this process dies first, the snapshot is dropped
// (GC), never listed half-written (TestCrashWhileSealing). A 100 MB
// checkpoint paid ~170 ms of SHA-256 and per-file fsync before Commit
// returned when this was on the critical path. A name another snapshot has is
// ErrNameInUse. Commit ends the staging, also on error: a failed Commit
// leaves nothing behind.
func (g *Staging) Commit(ctx context.Context, name, imageID string, lin sandbox.Lineage, meta any) (*sandbox.Snapshot, error) {
	return g.commitAs(ctx, newID(), name, imageID, lin, meta)
}

// commitAs is Commit under a given ID: a fresh one, or an imported
// snapshot's own.
func (g *Staging) commitAs(ctx context.Context, id, name, imageID string, lin sandbox.Lineage, meta any) (*sandbox.Snapshot, error) {
	if g.done {
		return nil, errors.New("commit snapshot: the staging was already committed or aborted")
	}
	if g.scratch {
		g.Abort()
		return nil, errors.New("commit snapshot: a scratch checkpoint is never stored")
	}
	snap, err := g.commit(ctx, id, name, imageID, lin, meta)
	if err != nil {
		g.Abort()
		return nil, fmt.Errorf("commit snapshot: %w", err)
	}
	g.done = true // the seal ends it
	sealCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.id, g.cancel = snap.ID, cancel
	g.s.mu.Lock()
	if g.s.running == nil {
		g.s.running = map[*Staging]bool{}
	}
	g.s.running[g] = true
	g.s.mu.Unlock()
	g.s.seals.Go(func() {
		if g.s.beforeSeal != nil {
			g.s.beforeSeal()
		}
		g.seal(sealCtx, snap.ID, snap.Files)
	})
	return snap, nil
}

// A Handoff is a seal that one process began and another finishes: the
// snapshot, its staging directory, and a duplicate of the staging's
// locked pid file. The lock is on the open file, not on the process, so
// GC keeps away for as long as any process holds it.
type Handoff struct {
	ID, Staging string
	Lock        *os.File
}

// HandOff passes each seal still running in this process to give, which
// starts another process that finishes it (Finish) holding h.Lock, and
// closes h.Lock. A seal given away stops here and leaves its staging to
// the other process; one that give refuses goes on here, and Wait waits
// for it. A CLI command hands its seals to a detached process instead of
// making its user wait for the hashing and the syncfs, as a Go program
// or smolvm serve, which go on running, does not wait.
func (s *Store) HandOff(give func(Handoff) error) {
	s.mu.Lock()
	gs := make([]*Staging, 0, len(s.running))
	for g := range s.running {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	for _, g := range gs {
		// Under mu, a running seal has not closed its pid file yet
		// (release): the duplicate holds the lock.
		s.mu.Lock()
		fd := -1
		if s.running[g] {
			fd, _ = unix.FcntlInt(g.pid.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		}
		s.mu.Unlock()
		if fd < 0 {
			continue // sealed meanwhile, or no descriptor left: it goes on here
		}
		lock := os.NewFile(uintptr(fd), g.pid.Name())
		err := give(Handoff{ID: g.id, Staging: g.root, Lock: lock})
		lock.Close()
		if err != nil {
			continue
		}
		s.mu.Lock()
		g.handedOff = true
		s.mu.Unlock()
		g.cancel()
	}
}

// Finish seals snapshot id for the process that committed it and handed
// the seal over (HandOff), with lock the staging's locked pid file. A
// snapshot sealed meanwhile is left as it is.
func (s *Store) Finish(ctx context.Context, id, staging string, lock *os.File) error {
	if filepath.Dir(staging) != s.dir || !strings.HasPrefix(filepath.Base(staging), stagingPrefix) {
		lock.Close()
		return fmt.Errorf("seal %s: %s is no staging directory of this store", id, staging)
	}
	g := &Staging{s: s, root: staging, pid: lock, done: true, id: id}
	if !sameFile(lock, filepath.Join(staging, pidName)) {
		// The committing process's seal ended and released the staging
		// after it handed the seal over: nothing of it to remove.
		g.root = ""
	}
	var filesJSON string
	var durable bool
	err := s.st.DB().QueryRowContext(ctx, `SELECT files, durable FROM snapshots WHERE id = ?`, id).Scan(&filesJSON, &durable)
	if err != nil || durable {
		g.release()
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("seal %s: %w", id, ErrNotFound)
		}
		return err
	}
	var committed []sandbox.File
	if err := json.Unmarshal([]byte(filesJSON), &committed); err != nil {
		g.release()
		return fmt.Errorf("seal %s: %w", id, err)
	}
	g.seal(ctx, id, committed)
	if err := s.st.DB().QueryRowContext(ctx, `SELECT durable FROM snapshots WHERE id = ?`, id).Scan(&durable); err != nil || !durable {
		return fmt.Errorf("seal %s: not sealed (%v)", id, err)
	}
	return nil
}

// sameFile reports whether f is the file at path.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

func (g *Staging) commit(ctx context.Context, id, name, imageID string, lin sandbox.Lineage, meta any) (*sandbox.Snapshot, error) {
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
	files, err := listTree(ctx, g.Dir())
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
			if err == nil {
				if _, scoped := tenant.Of(ctx); scoped {
					return fmt.Errorf("%w: %s", ErrNameInUse, name) // perhaps another tenant's: say no more
				}
				return fmt.Errorf("%w: %s is snapshot %s", ErrNameInUse, name, shortID(owner))
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO snapshots(id, sandbox, sandbox_name, parent, image_id, created, size, files, meta, durable, sealer, tenant)
			VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`,
			id, lin.Sandbox, lin.SandboxName, lin.Parent, imageID, now, size, string(filesJSON), string(metaJSON), filepath.Base(g.root), tenant.Owner(ctx))
		if err != nil {
			return err
		}
		if name != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO snapshot_names(name, snapshot_id, created) VALUES(?, ?, ?)`, name, id, now); err != nil {
				return err
			}
		}
		// Under the lock, a directory without a row is garbage from a
		// crashed Commit or Remove. No sync here: until the seal, the
		// row counts only while its sealer lives.
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.Rename(g.Dir(), target); err != nil {
			return err
		}
		renamed = true
		return nil
	})
	if err != nil {
		if renamed {
			os.RemoveAll(target) // it has no row
		}
		return nil, err
	}
	return g.s.load(ctx, id)
}

// newID is a fresh snapshot ID: 256 random bits in hex. The content
// digest comes later, with durability.
func newID() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// seal hashes the files of the committed snapshot id, makes them and the
// store's directory durable with one syncfs, and then marks the row
// durable with its digest and checksums. It ends the staging, whose lock
// told GC that the snapshot was still being sealed. A seal that fails
// leaves the row not durable; GC drops it once this process is gone.
// Files that no longer match the listing committed (a file truncated,
// grown or added since) keep that listing and get no digest: hashing
// them would bless the damage, and Verify's size check refuses them as
// corrupt, with a clear error, until the snapshot is removed.
func (g *Staging) seal(ctx context.Context, id string, committed []sandbox.File) {
	defer g.release()
	dir, err := g.s.path(id)
	if err != nil {
		return
	}
	files, err := hashTree(ctx, dir)
	if err != nil {
		return // removed meanwhile, or unreadable: it stays not durable
	}
	sum := digest(files)
	if !sameListing(files, committed) {
		files, sum = committed, ""
	}
	filesJSON, err := json.Marshal(files)
	if err != nil {
		return
	}
	if err := syncFS(g.s.dir); err != nil {
		return
	}
	if ctx.Err() != nil {
		return // handed over (HandOff): the other process marks it
	}
	g.s.st.DB().ExecContext(ctx, `UPDATE snapshots SET files = ?, digest = ?, durable = 1, sealer = '' WHERE id = ?`,
		string(filesJSON), sum, id)
}

// release drops the staging directory and its lock; what RemoveAll
// leaves, GC removes once the lock is gone. A staging whose seal was
// handed over belongs to the other process, which releases it.
func (g *Staging) release() {
	g.s.mu.Lock()
	delete(g.s.running, g)
	handedOff := g.handedOff
	g.s.mu.Unlock()
	if g.root != "" && !handedOff {
		os.RemoveAll(g.root)
	}
	if g.pid != nil {
		g.pid.Close()
	}
	if g.scratch {
		os.Remove(filepath.Dir(g.root)) // only if no other is in it
	}
}

// sameListing reports whether two listings name the same files with the
// same sizes, in the same (sorted) order.
func sameListing(a, b []sandbox.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Size != b[i].Size {
			return false
		}
	}
	return true
}

// listTree lists the files under dir with their sizes, sorted by name,
// reading none of them. Anything but regular files and directories is an
// error.
func listTree(ctx context.Context, dir string) ([]sandbox.File, error) {
	var files []sandbox.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
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
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, sandbox.File{Name: rel, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	// WalkDir's order puts "a/b" before "a.b"; the digest wants byte order.
	slices.SortFunc(files, func(a, b sandbox.File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// hashTree lists the files under dir and hashes each, reading it once.
func hashTree(ctx context.Context, dir string) ([]sandbox.File, error) {
	files, err := listTree(ctx, dir)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, err := hashFile(ctx, filepath.Join(dir, filepath.FromSlash(f.Name)), buf)
		if err != nil {
			return nil, err
		}
		h.Name = f.Name
		files[i] = h
	}
	return files, nil
}

func hashFile(ctx context.Context, path string, buf []byte) (sandbox.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return sandbox.File{}, err
	}
	defer fh.Close()
	sum, crc := sha256.New(), crc32.New(crcTable)
	// A seal handed over stops within a buffer (1 MB), not a file.
	n, err := io.CopyBuffer(io.MultiWriter(sum, crc), ctxReader{ctx, fh}, buf)
	if err != nil {
		return sandbox.File{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return sandbox.File{Size: n, SHA256: hex.EncodeToString(sum.Sum(nil)), CRC32C: crc.Sum32()}, nil
}

// ctxReader reads r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
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

// syncFS makes everything written to the filesystem that holds dir
// durable: one syncfs instead of an fsync per file and directory.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
