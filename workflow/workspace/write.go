package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// writer changes files in the tree. Every operation goes through an
// os.Root, which cannot leave the tree, and refuses parent directories
// that are symlinks even within it: the policy judged the path as named,
// so it must not land somewhere else.
type writer struct {
	src, tree *os.Root
}

func newWriter(src, tree string) (*writer, error) {
	s, err := os.OpenRoot(src)
	if err != nil {
		return nil, err
	}
	t, err := os.OpenRoot(tree)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &writer{src: s, tree: t}, nil
}

func (w *writer) close() {
	w.src.Close()
	w.tree.Close()
}

// remove deletes name, then the directories it leaves empty that the
// sandbox's copy does not have either.
func (w *writer) remove(name string) error {
	if err := w.parents(name, false); err != nil {
		return err
	}
	if err := w.tree.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if fi, err := w.src.Lstat(dir); err == nil && fi.IsDir() {
			return nil
		}
		if w.tree.Remove(dir) != nil {
			return nil // not empty: other files stay
		}
	}
	return nil
}

// write replaces name in the tree with the sandbox's version: written to
// a temporary file beside it, then renamed over it.
func (w *writer) write(name string, e entry) error {
	if err := w.parents(name, true); err != nil {
		return err
	}
	uid, gid := w.owner(name)
	tmp := path.Join(path.Dir(name), ".smolvm-apply-"+randomHex())
	var err error
	if e.symlink() {
		err = w.symlink(name, tmp)
	} else {
		err = w.copyFile(name, tmp, perm(e.mode))
	}
	if err == nil && uid >= 0 {
		err = w.tree.Lchown(tmp, uid, gid)
	}
	if err == nil {
		err = w.tree.Rename(tmp, name)
	}
	if err != nil {
		w.tree.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func (w *writer) symlink(name, tmp string) error {
	target, err := w.src.Readlink(name)
	if err != nil {
		return err
	}
	return w.tree.Symlink(target, tmp)
}

func (w *writer) copyFile(name, tmp string, mode fs.FileMode) error {
	in, err := w.src.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := w.tree.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(mode) // the umask does not get a say
	}
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}

// parents checks that every directory above name is a real directory in
// the tree, creating missing ones when create is set.
func (w *writer) parents(name string, create bool) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := w.tree.Lstat(p)
		switch {
		case err == nil && fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s: parent %s is a symlink", name, p)
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s: parent %s is not a directory", name, p)
		case err == nil:
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := w.mkdir(p); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

func (w *writer) mkdir(dir string) error {
	mode := fs.FileMode(0o755)
	if fi, err := w.src.Lstat(dir); err == nil && fi.IsDir() {
		mode = perm(fi.Mode())
	}
	uid, gid := w.owner(dir) // the parent's, as dir does not exist yet
	if err := w.tree.Mkdir(dir, mode); err != nil {
		return err
	}
	if err := w.tree.Chmod(dir, mode); err != nil {
		return err
	}
	if uid >= 0 {
		return w.tree.Lchown(dir, uid, gid)
	}
	return nil
}

// owner returns who should own name when smolvm runs as root: whoever owns
// the file it replaces, else its directory, so that the user's tree stays
// the user's. It returns -1 when there is nothing to change.
func (w *writer) owner(name string) (int, int) {
	if os.Geteuid() != 0 {
		return -1, -1
	}
	fi, err := w.tree.Lstat(name)
	if err != nil {
		fi, err = w.tree.Lstat(path.Dir(name))
	}
	if err != nil {
		return -1, -1
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

func randomHex() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
