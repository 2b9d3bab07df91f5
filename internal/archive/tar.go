// Package archive writes and extracts the tar streams that cp moves in and
// out of sandboxes, refusing entries that would leave their destination.
package archive

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/errdefs"
)

// ErrTooLarge is returned when an archive exceeds the extraction limit.
var ErrTooLarge = errdefs.New(errdefs.ErrQuota, "archive exceeds size limit")

// WriteTar writes src (a file or a directory tree) as a tar stream whose
// entries are rooted at src's base name. Symlinks are stored, not followed.
func WriteTar(w io.Writer, src string) error {
	tw := tar.NewWriter(w)
	src = filepath.Clean(src)
	base := filepath.Base(src)
	if base == "/" {
		base = "."
	}
	links := map[uint64]string{} // inode → first name, to keep hardlinks
	err := filepath.Walk(src, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join(base, rel))
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if fi.Mode().IsRegular() {
			if ino, nlink := inode(fi); nlink > 1 {
				if first, ok := links[ino]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[ino] = name
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ExtractTar extracts a tar stream written by WriteTar to dst with `cp`
// semantics: into dst when dst is an existing directory, otherwise as dst
// itself (the archive's top entry renamed). Nothing is ever written outside
// the target directory, whatever the archive's names or symlinks say, and
// at most limit bytes of file content are written (0: no limit).
func ExtractTar(r io.Reader, dst string, limit int64) error {
	dst = filepath.Clean(dst)
	dir, rename := dst, ""
	if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
		dir, rename = filepath.Dir(dst), filepath.Base(dst)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	top := ""
	var written int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		first, rest, _ := strings.Cut(name, "/")
		if top == "" {
			top = first
		} else if first != top {
			return fmt.Errorf("archive entry %q is outside %q", hdr.Name, top)
		}
		if rename != "" {
			name = path.Join(rename, rest)
		}
		if err := noSymlinkParents(root, name); err != nil {
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		mode := fs.FileMode(hdr.Mode) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			err = root.Chmod(name, mode|fs.ModeDir)
		case tar.TypeReg:
			if limit > 0 && written+hdr.Size > limit {
				return fmt.Errorf("%s: %w (%d bytes)", hdr.Name, ErrTooLarge, limit)
			}
			n, werr := writeFile(root, name, tr, hdr.Size, mode)
			written += n
			err = werr
		case tar.TypeSymlink:
			root.Remove(name)
			err = root.Symlink(hdr.Linkname, name)
		case tar.TypeLink:
			target, lerr := cleanName(hdr.Linkname)
			if lerr != nil {
				return lerr
			}
			if rename != "" {
				_, trest, _ := strings.Cut(target, "/")
				target = path.Join(rename, trest)
			}
			root.Remove(name)
			err = root.Link(target, name)
		default:
			continue // devices, fifos: not copied
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
		if os.Geteuid() == 0 {
			root.Lchown(name, hdr.Uid, hdr.Gid)
		}
	}
}

// noSymlinkParents refuses a name whose parent directories include a
// symlink. os.Root should refuse to follow one out of the root, but inside
// gVisor it does not (an entry under a symlink to / was written at /), so
// the agent checks each parent itself.
func noSymlinkParents(root *os.Root, name string) error {
	for i := range len(name) {
		if name[i] != '/' {
			continue
		}
		fi, err := root.Lstat(name[:i])
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created below, as a directory
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink: refusing to write through it", name[:i])
		}
	}
	return nil
}

// cleanName rejects absolute names and names that climb out with "..".
func cleanName(name string) (string, error) {
	c := path.Clean(strings.TrimPrefix(name, "./"))
	if c == "." || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("unsafe archive entry %q", name)
	}
	return c, nil
}

// writeFile writes size bytes of r as name under root, through a
// temporary file renamed into place: a write that fails (a full disk)
// leaves the file that was there as it was and no partial file taking
// the space. The rename replaces a symlink at name, never writes through
// it. The temporary name is the guest's upload marker (.NAME.smolvm-…),
// which watchers hide.
func writeFile(root *os.Root, name string, r io.Reader, size int64, mode fs.FileMode) (int64, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".smolvm-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyN(f, r, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, mode)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return n, fmt.Errorf("write %s: %w", name, err)
	}
	return n, nil
}
