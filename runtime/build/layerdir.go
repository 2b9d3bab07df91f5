package build

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"smolvm.dev/smolvm/runtime/image"
)

// ids is a uid and gid.
type ids struct{ uid, gid int }

// layerDir is a layer being made on the host, over an image's view. It is
// written through an os.Root: a symlink the step itself put there (from a
// stage, say) can never lead a later write out of it.
type layerDir struct {
	root      *os.Root
	view      string
	owner     *ids // --chown
	keepOwner bool // files from a stage or image keep theirs
}

func newLayerDir(dir, view string) (*layerDir, error) {
	p := filepath.Join(dir, "layer")
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(p)
	if err != nil {
		return nil, err
	}
	return &layerDir{root: root, view: view}, nil
}

// add puts the host file p at dst (a path in the image).
func (l *layerDir) add(p, dst string, fi fs.FileInfo) error {
	rd, err := resolve(l.view, dst, fi.IsDir())
	if err != nil {
		return err
	}
	if err := l.parents(path.Dir(rd)); err != nil {
		return err
	}
	target := strings.TrimPrefix(rd, "/")
	switch {
	case fi.IsDir():
		if err := l.root.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return err
		}
		l.root.Remove(target)
		if err := l.root.Symlink(t, target); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		if err := l.copyFile(p, target); err != nil {
			return err
		}
	default:
		return nil // devices, sockets, fifos: not copied
	}
	uid, gid := 0, 0
	if l.keepOwner {
		uid, gid = owner(fi)
	}
	if l.owner != nil {
		uid, gid = l.owner.uid, l.owner.gid
	}
	return l.meta(target, fi, uid, gid)
}

// meta gives target fi's mode and time, and an owner.
func (l *layerDir) meta(target string, fi fs.FileInfo, uid, gid int) error {
	if err := l.root.Lchown(target, uid, gid); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil // the root's chmod and chtimes would follow it
	}
	if err := l.root.Chmod(target, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return l.root.Chtimes(target, fi.ModTime(), fi.ModTime())
}

// owner is the uid and gid of a file os.Lstat or os.Stat described.
func owner(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// parents makes dir and its parents in the layer: as the image has them
// (mode, owner, time), so the layer changes none of them, or new.
func (l *layerDir) parents(dir string) error {
	cur := ""
	for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
		if c == "" {
			continue
		}
		cur = path.Join(cur, c)
		if _, err := l.root.Lstat(cur); err == nil {
			continue
		}
		if err := l.root.Mkdir(cur, 0o755); err != nil {
			return err
		}
		uid, gid := 0, 0
		if fi, err := os.Stat(filepath.Join(l.view, cur)); err == nil && fi.IsDir() {
			uid, gid := owner(fi)
			if err := l.meta(cur, fi, uid, gid); err != nil {
				return err
			}
			continue
		}
		if l.owner != nil {
			uid, gid = l.owner.uid, l.owner.gid
		}
		if err := l.root.Lchown(cur, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// tar writes the layer as a tarball in dir.
func (l *layerDir) tar(dir string) (string, error) {
	p := filepath.Join(dir, "layer.tar")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := image.WriteLayer(f, l.root.Name(), nil); err != nil {
		return "", err
	}
	return p, f.Close()
}

// copyFile copies the host file src to target in the layer, replacing
// whatever was there (never following a symlink at target).
func (l *layerDir) copyFile(src, target string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	l.root.Remove(target)
	out, err := l.root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
