package build

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
)

// view mounts img's files read-only on the host, as a sandbox of it sees
// them, for COPY's sources and destinations. A nil img is an empty view.
func (b *Builder) view(img *sandbox.Image) (root string, release func(), err error) {
	root, err = os.MkdirTemp(b.scratch, image.TempName()+"view-")
	if err != nil {
		return "", nil, err
	}
	release = func() {
		unix.Unmount(root, unix.MNT_DETACH)
		os.Remove(root)
	}
	if img == nil {
		return root, release, nil
	}
	layers := b.images.Layers(img)
	switch len(layers) {
	case 0:
	case 1:
		// overlayfs needs two lower layers when it has no upper one.
		if err = unix.Mount(layers[0].Dir, root, "", unix.MS_BIND|unix.MS_RDONLY, ""); err == nil {
			err = unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
		}
	default:
		dirs := make([]string, len(layers))
		for i, l := range layers {
			dirs[len(layers)-1-i] = l.Dir
		}
		err = unix.Mount("overlay", root, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+strings.Join(dirs, ":"))
	}
	if err != nil {
		release()
		return "", nil, fmt.Errorf("mount the image's files: %w", err)
	}
	return root, release, nil
}

// resolve follows the symlinks of p's directories (and of p itself when
// last is set) inside root, as the sandbox would, and returns the path
// they lead to, absolute within root. A Debian image's /bin is a symlink
// to usr/bin: a layer holding a directory /bin would hide it.
func resolve(root, p string, last bool) (string, error) {
	out := "/"
	parts := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	for hops := 0; len(parts) > 0; {
		c := parts[0]
		parts = parts[1:]
		if c == "" || c == "." {
			continue
		}
		next := path.Join(out, c)
		if len(parts) == 0 && !last {
			return next, nil
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTDIR) {
			out = next // missing, or not a symlink
			continue
		}
		if err != nil {
			return "", err
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		if path.IsAbs(target) {
			out = "/"
		}
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
	}
	return out, nil
}
