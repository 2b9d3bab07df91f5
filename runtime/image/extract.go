package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// OCI whiteout names, and the overlayfs xattr that marks an opaque directory.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// extract unpacks the layer tar r into the empty directory dir, turning OCI
// whiteouts into overlayfs ones, and checks that the sha256 of r is diffID.
// It returns the bytes of regular files written.
//
// Every path is resolved one component at a time with O_NOFOLLOW relative
// to dir, so no entry can reach outside dir: not with "..", and not through
// a symlink, which the layer may contain but extraction never follows.
func extract(ctx context.Context, r io.Reader, dir string, diffID v1.Hash, b *budget) (int64, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("layer %s: open %s: %w", diffID, dir, err)
	}
	defer unix.Close(root)

	src := &errReader{r: r}
	h := sha256.New()
	tee := io.TeeReader(src, h)
	x := &extractor{root: root, budget: b}
	corrupt := func(err error) error {
		if src.err != nil {
			return fmt.Errorf("layer %s: %w", diffID, src.err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) {
			err = fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return fmt.Errorf("layer %s: %w", diffID, err)
	}
	tr := tar.NewReader(tee)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, corrupt(err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return 0, corrupt(err)
		}
	}
	// Whatever follows the end-of-archive marker is part of the diffID too.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return 0, corrupt(err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID.String() {
		return 0, fmt.Errorf("%w: layer content is %s, not the diffID %s of the image config", ErrCorrupt, got, diffID)
	}
	if err := x.finish(); err != nil {
		return 0, fmt.Errorf("layer %s: %w", diffID, err)
	}
	if err := unix.Syncfs(root); err != nil {
		return 0, fmt.Errorf("layer %s: sync: %w", diffID, err)
	}
	return x.size, nil
}

// errReader remembers the error of the underlying stream, to tell a
// broken download from a broken archive.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

type extractor struct {
	root   int
	budget *budget
	size   int64
	dirs   []dirTime
}

// dirTime is a directory's modification time, set after its entries are
// written because writing them changes it.
type dirTime struct {
	path  string
	mtime time.Time
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	x.budget.entries--
	if x.budget.entries < 0 {
		return fmt.Errorf("%w: image has too many files", ErrCorrupt)
	}
	rel, err := cleanPath(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: layer root %q is not a directory", ErrCorrupt, hdr.Name)
		}
		x.dirs = append(x.dirs, dirTime{".", hdr.ModTime})
		return setMeta(x.root, ".", hdr)
	}
	parent, base := path.Split(rel)
	pfd, err := x.openDir(path.Clean(parent), true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)

	if strings.HasPrefix(base, whiteoutPrefix) {
		return whiteout(pfd, rel, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		keep, err := makeRoom(pfd, base, true)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if !keep {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		x.dirs = append(x.dirs, dirTime{rel, hdr.ModTime})
		return setMeta(pfd, base, hdr)

	case tar.TypeReg, tar.TypeGNUSparse:
		x.budget.bytes -= hdr.Size
		if x.budget.bytes < 0 {
			return fmt.Errorf("%w: image unpacks to too many bytes", ErrCorrupt)
		}
		if _, err := makeRoom(pfd, base, false); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		if _, err := io.CopyN(f, r, hdr.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		x.size += hdr.Size
		return setMeta(pfd, base, hdr)

	case tar.TypeSymlink:
		if _, err := makeRoom(pfd, base, false); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return setMeta(pfd, base, hdr)

	case tar.TypeLink:
		target, err := cleanPath(hdr.Linkname)
		if err != nil {
			return err
		}
		tparent, tbase := path.Split(target)
		if target == "." {
			return fmt.Errorf("%w: %s: hard link to the layer root", ErrCorrupt, rel)
		}
		tfd, err := x.openDir(path.Clean(tparent), false)
		if err != nil {
			return err
		}
		defer unix.Close(tfd)
		if _, err := makeRoom(pfd, base, false); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			return fmt.Errorf("%w: %s: hard link to %s: %v", ErrCorrupt, rel, target, err)
		}
		return nil

	case tar.TypeFifo:
		if _, err := makeRoom(pfd, base, false); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return setMeta(pfd, base, hdr)
	}
	// Device nodes would give the sandbox raw access to host devices were the
	// rootfs ever used outside gVisor; other types carry nothing to unpack.
	return nil
}

// whiteout converts an OCI whiteout entry named base into its overlayfs form.
func whiteout(pfd int, rel, base string) error {
	if base == whiteoutOpaque {
		if err := unix.Fsetxattr(pfd, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("%s: mark opaque: %w", rel, err)
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS metadata has no overlayfs meaning
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: bad whiteout %q", ErrCorrupt, rel)
	}
	if _, err := makeRoom(pfd, name, false); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if err := unix.Mknodat(pfd, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("%s: whiteout: %w", rel, err)
	}
	return nil
}

// cleanPath makes a tar entry name relative to the layer root, refusing
// names that climb out of it.
func cleanPath(name string) (string, error) {
	p := strings.TrimLeft(path.Clean("/"+strings.TrimLeft(name, "/")), "/")
	// Clean of a rooted path swallows "..", so compare against the unrooted
	// form to notice names that tried to climb.
	if c := path.Clean(strings.TrimLeft(name, "/")); c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: entry %q escapes the layer", ErrCorrupt, name)
	}
	if p == "" {
		return ".", nil
	}
	return p, nil
}

// openDir opens the directory rel below the layer root without following
// symlinks, creating missing components when create is set.
func (x *extractor) openDir(rel string, create bool) (int, error) {
	fd, err := unix.Openat(x.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil {
				nfd, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: %s: a path component is a symlink or not a directory", ErrCorrupt, rel)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", rel, err)
		}
		fd = nfd
	}
	return fd, nil
}

// makeRoom makes room for a new entry named base: a later entry replaces an
// earlier one of the same name, except that a directory stays a directory
// (keep is then true).
func makeRoom(pfd int, base string, dir bool) (keep bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir && dir {
		return true, nil
	}
	flags := 0
	if isDir {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, base, flags); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) {
			return false, fmt.Errorf("%w: replaces a non-empty directory", ErrCorrupt)
		}
		return false, err
	}
	return false, nil
}

// keptXattrs are the extended attribute namespaces taken from layers. The
// trusted namespace is not among them: an image must not forge overlayfs
// markers.
var keptXattrs = []string{"user.", "security.capability"}

// setMeta applies ownership, mode (set after chown, which clears setuid),
// xattrs and times to the entry base in the directory pfd.
func setMeta(pfd int, base string, hdr *tar.Header) error {
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s: %w", hdr.Name, err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("chmod %s: %w", hdr.Name, err)
		}
		for k, v := range hdr.PAXRecords {
			attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
			if !ok || !keptXattr(attr) {
				continue
			}
			p := fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base)
			if err := unix.Lsetxattr(p, attr, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s of %s: %w", attr, hdr.Name, err)
			}
		}
	}
	return setTime(pfd, base, hdr.ModTime)
}

func keptXattr(attr string) bool {
	for _, k := range keptXattrs {
		if strings.HasPrefix(attr, k) {
			return true
		}
	}
	return false
}

func setTime(pfd int, base string, mtime time.Time) error {
	ts, err := unix.TimeToTimespec(mtime)
	if err != nil {
		return nil // out of range for this system: keep the extraction time
	}
	if err := unix.UtimesNanoAt(pfd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set time of %s: %w", base, err)
	}
	return nil
}

// finish sets directory times, deepest last-written first.
func (x *extractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if d.path == "." {
			if err := setTime(x.root, ".", d.mtime); err != nil {
				return err
			}
			continue
		}
		parent, base := path.Split(d.path)
		pfd, err := x.openDir(path.Clean(parent), false)
		if err != nil {
			return err
		}
		err = setTime(pfd, base, d.mtime)
		unix.Close(pfd)
		if err != nil {
			return err
		}
	}
	return nil
}
