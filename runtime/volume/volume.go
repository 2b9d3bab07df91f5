// Package volume keeps named volumes: each tenant's, each an ext4 file system in an image file of its size quota, loop-mounted on the host for the sandboxes that bind-mount it.
package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/internal/units"
	"smolvm.dev/smolvm/sandbox"
)

// A volume's record is written before its files and removed after them:
// a row left "creating" or "removing" by a crash is finished (its files
// removed) by the next Open.
const (
	stateCreating = "creating"
	stateReady    = "ready"
	stateRemoving = "removing"
)

var schema = []string{
	`CREATE TABLE volumes (
		tenant TEXT NOT NULL,
		name TEXT NOT NULL,
		size INTEGER NOT NULL,
		state TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, name)
	)`,
}

// Store keeps the volumes of one data dir under DIR/volumes: per volume
// OWNER/NAME/disk.ext4 (the file system, sparse) and OWNER/NAME/data
// (where it is mounted). Every change, and every mount, happens under one
// file lock shared by all processes on the data dir.
type Store struct {
	root string
	st   *store.Store
}

// Open opens the volume store of dataDir and finishes what a crashed
// process left half-done.
func Open(ctx context.Context, dataDir string, st *store.Store) (*Store, error) {
	if err := st.Migrate(ctx, "volume", schema); err != nil {
		return nil, err
	}
	s := &Store{root: filepath.Join(dataDir, "volumes"), st: st}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err := s.recover(ctx); err != nil {
		return nil, fmt.Errorf("volumes: recover: %w", err)
	}
	return s, nil
}

// recover removes the files and rows of volumes whose create or remove
// did not finish. Under the lock, such a row is a dead process's.
func (s *Store) recover(ctx context.Context) error {
	var n int
	if err := s.st.DB().QueryRowContext(ctx, `SELECT count(*) FROM volumes WHERE state != ?`, stateReady).Scan(&n); err != nil || n == 0 {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	rows, err := s.st.DB().QueryContext(ctx, `SELECT tenant, name FROM volumes WHERE state != ?`, stateReady)
	if err != nil {
		return err
	}
	type key struct{ owner, name string }
	var left []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.owner, &k.name); err != nil {
			rows.Close()
			return err
		}
		left = append(left, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range left {
		if err := s.destroy(ctx, k.owner, k.name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) lock() (func(), error) { return flock.Lock(filepath.Join(s.root, "lock")) }

// dir is a volume's directory. The admin's volumes are under "_", which
// no tenant name can be.
func (s *Store) dir(owner, name string) (string, error) {
	if owner == "" {
		owner = "_"
	}
	return names.Join(s.root, owner, name)
}

// Create makes owner's volume o.Name of o.Size bytes (0: the default).
// With limit above 0, the sizes of owner's volumes may not add up to more
// (checked under the lock, so concurrent creates cannot pass it
// together); over it, the error wraps overLimit.
func (s *Store) Create(ctx context.Context, owner string, o sandbox.VolumeOptions, limit int64, overLimit error) (*sandbox.Volume, error) {
	if err := names.Check(names.Volume, o.Name); err != nil {
		return nil, err
	}
	if o.Size == 0 {
		o.Size = sandbox.DefaultVolumeSize
	}
	if o.Size < sandbox.MinVolumeSize || o.Size > sandbox.MaxVolumeSize {
		return nil, fmt.Errorf("%w: volume size %d: must be from %s to %s", sandbox.ErrInvalid, o.Size, units.FormatBytes(sandbox.MinVolumeSize), units.FormatBytes(sandbox.MaxVolumeSize))
	}
	dir, err := s.dir(owner, o.Name)
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if limit > 0 {
		var held int64
		if err := s.st.DB().QueryRowContext(ctx, `SELECT coalesce(sum(size), 0) FROM volumes WHERE tenant = ?`, owner).Scan(&held); err != nil {
			return nil, fmt.Errorf("volume %s: %w", o.Name, err)
		}
		if held+o.Size > limit {
			return nil, fmt.Errorf("volume %s: %w: %s of volumes (%s held, %s asked)", o.Name, overLimit,
				units.FormatBytes(limit), units.FormatBytes(held), units.FormatBytes(o.Size))
		}
	}
	now := store.Now()
	if _, err := s.st.DB().ExecContext(ctx, `INSERT INTO volumes (tenant, name, size, state, created_at) VALUES (?, ?, ?, ?, ?)`,
		owner, o.Name, o.Size, stateCreating, now.UnixMilli()); err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return nil, fmt.Errorf("volume %s: %w", o.Name, sandbox.ErrVolumeExists)
		}
		return nil, fmt.Errorf("volume %s: %w", o.Name, err)
	}
	if err := makeFS(ctx, dir, o.Size); err != nil {
		// A fresh context: ctx may be why it failed.
		s.destroy(context.WithoutCancel(ctx), owner, o.Name)
		return nil, fmt.Errorf("volume %s: %w", o.Name, err)
	}
	if _, err := s.st.DB().ExecContext(ctx, `UPDATE volumes SET state = ? WHERE tenant = ? AND name = ?`, stateReady, owner, o.Name); err != nil {
		s.destroy(context.WithoutCancel(ctx), owner, o.Name)
		return nil, fmt.Errorf("volume %s: %w", o.Name, err)
	}
	return &sandbox.Volume{Name: o.Name, Size: o.Size, CreatedAt: now, Tenant: owner, Used: used(filepath.Join(dir, "data"))}, nil
}

// makeFS makes dir with an ext4 file system of size bytes and mounts it.
// Reserved blocks are none: the quota is all the sandbox's.
func makeFS(ctx context.Context, dir string, size int64) error {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return err
	}
	disk := filepath.Join(dir, "disk.ext4")
	f, err := os.OpenFile(disk, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0", disk); err != nil {
		return err
	}
	return mount(ctx, dir)
}

// mount loop-mounts dir's disk on dir/data, unless it is mounted already
// (after a host reboot it is not). nosuid and nodev: what a sandbox
// writes there is never a set-uid program or a device on the host.
func mount(ctx context.Context, dir string) error {
	data := filepath.Join(dir, "data")
	if mounted(data) {
		return nil
	}
	return run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", filepath.Join(dir, "disk.ext4"), data)
}

// mounted reports whether a file system is mounted on dir: it is on
// another device than its parent.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// used is how many bytes a mounted volume's file system holds (0 if it is
// not mounted).
func used(data string) int64 {
	var fs unix.Statfs_t
	if !mounted(data) || unix.Statfs(data, &fs) != nil {
		return 0
	}
	return int64(fs.Blocks-fs.Bfree) * fs.Bsize
}

// run runs a tool, which dies with smolvm: a crash leaves no mkfs
// writing into a volume the next open removes.
func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Check reports what this host lacks to make and mount volumes: the
// mkfs.ext4 and mount tools, ext4 and loop devices.
func Check() error {
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (apt-get install e2fsprogs mount)", tool)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices: %w (modprobe loop)", err)
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !strings.Contains(string(fs), "\text4\n") {
		return errors.New("the kernel has no ext4 (modprobe ext4)")
	}
	return nil
}

// Get returns owner's volume name.
func (s *Store) Get(ctx context.Context, owner, name string) (*sandbox.Volume, error) {
	if err := names.Check(names.Volume, name); err != nil {
		return nil, err
	}
	vs, err := s.query(ctx, `WHERE tenant = ? AND name = ? AND state = ?`, owner, name, stateReady)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("volume %s: %w", name, sandbox.ErrVolumeNotFound)
	}
	return vs[0], nil
}

// List returns owner's volumes by name, or every tenant's if all.
func (s *Store) List(ctx context.Context, owner string, all bool) ([]*sandbox.Volume, error) {
	if all {
		return s.query(ctx, `WHERE state = ? ORDER BY tenant, name`, stateReady)
	}
	return s.query(ctx, `WHERE tenant = ? AND state = ? ORDER BY name`, owner, stateReady)
}

func (s *Store) query(ctx context.Context, where string, args ...any) ([]*sandbox.Volume, error) {
	rows, err := s.st.DB().QueryContext(ctx, `SELECT tenant, name, size, created_at FROM volumes `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	defer rows.Close()
	out := []*sandbox.Volume{}
	for rows.Next() {
		v := &sandbox.Volume{}
		var created int64
		if err := rows.Scan(&v.Tenant, &v.Name, &v.Size, &created); err != nil {
			return nil, fmt.Errorf("volumes: %w", err)
		}
		v.CreatedAt = time.UnixMilli(created).UTC()
		if dir, err := s.dir(v.Tenant, v.Name); err == nil {
			v.Used = used(filepath.Join(dir, "data"))
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Mount makes sure owner's volume name is mounted on the host and returns
// the directory a sandbox bind-mounts. A sandbox's record must exist
// before it calls Mount: Remove, under the same lock, then sees it as a
// user.
func (s *Store) Mount(ctx context.Context, owner, name string) (string, error) {
	if err := names.Check(names.Volume, name); err != nil {
		return "", err
	}
	dir, err := s.dir(owner, name)
	if err != nil {
		return "", err
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := s.Get(ctx, owner, name); err != nil {
		return "", err
	}
	if err := mount(ctx, dir); err != nil {
		return "", fmt.Errorf("volume %s: %w", name, err)
	}
	return filepath.Join(dir, "data"), nil
}

// Remove deletes owner's volume name and its files. users names the
// sandboxes whose config mounts it; with any, Remove refuses unless
// force. A forced remove detaches the host's mount: a running sandbox
// keeps its view of the files until it stops, and cannot start again.
func (s *Store) Remove(ctx context.Context, owner, name string, force bool, users func(context.Context) ([]string, error)) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.Get(ctx, owner, name); err != nil {
		return err
	}
	in, err := users(ctx)
	if err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	if len(in) > 0 && !force {
		return fmt.Errorf("volume %s: %w by %s (remove them first, or force)", name, sandbox.ErrVolumeInUse, strings.Join(in, ", "))
	}
	if _, err := s.st.DB().ExecContext(ctx, `UPDATE volumes SET state = ? WHERE tenant = ? AND name = ?`, stateRemoving, owner, name); err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return s.destroy(ctx, owner, name)
}

// destroy unmounts a volume, removes its files, then its row.
func (s *Store) destroy(ctx context.Context, owner, name string) error {
	dir, err := s.dir(owner, name)
	if err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	for mounted(data) {
		// Detached: a sandbox's gofer may hold it; the loop device goes
		// with the last user (mount set autoclear).
		if err := unix.Unmount(data, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("volume %s: unmount: %w", name, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	if _, err := s.st.DB().ExecContext(ctx, `DELETE FROM volumes WHERE tenant = ? AND name = ?`, owner, name); err != nil {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return nil
}
