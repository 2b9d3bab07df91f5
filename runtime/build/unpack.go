package build

import (
	"archive/tar"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// archiveKind names the local archive ADD unpacks ("tar", "gzip",
// "bzip2", "zstd"), or is "" for any other file. xz, which docker also
// unpacks, is refused: nothing here reads it.
func archiveKind(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return "gzip", nil
	case bytes.HasPrefix(head, []byte("BZh")):
		return "bzip2", nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd", nil
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "", fmt.Errorf("ADD %s: unpacking xz is not supported: COPY it and unpack it in a RUN step", path.Base(p))
	case n >= 262 && string(head[257:262]) == "ustar":
		return "tar", nil
	}
	return "", nil
}

// unpack extracts the archive p into the image's directory dst, as ADD
// does: entries keep their owner (unless --chown), mode and time, and
// every write goes through the layer's os.Root.
func (l *layerDir) unpack(p, kind, dst string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	switch kind {
	case "gzip":
		zr, err := gzip.NewReader(f)
		if err != nil {
			return err
		}
		r = zr
	case "bzip2":
		r = bzip2.NewReader(f)
	case "zstd":
		zr, err := zstd.NewReader(f)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.entry(hdr, tr, dst); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

// entry writes one archive entry under dst; names cannot climb out of it.
func (l *layerDir) entry(hdr *tar.Header, r io.Reader, dst string) error {
	name := path.Clean("/" + hdr.Name)
	if name == "/" {
		return nil
	}
	fi := hdr.FileInfo()
	rd, err := resolve(l.view, path.Join(dst, name), fi.IsDir())
	if err != nil {
		return err
	}
	if err := l.parents(path.Dir(rd)); err != nil {
		return err
	}
	target := strings.TrimPrefix(rd, "/")
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := l.root.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		l.root.Remove(target)
		out, err := l.root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(out, r, hdr.Size)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		l.root.Remove(target)
		if err := l.root.Symlink(hdr.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		old, err := resolve(l.view, path.Join(dst, path.Clean("/"+hdr.Linkname)), false)
		if err != nil {
			return err
		}
		l.root.Remove(target)
		return l.root.Link(strings.TrimPrefix(old, "/"), target)
	default:
		return nil // devices and fifos: not unpacked
	}
	uid, gid := hdr.Uid, hdr.Gid
	if l.owner != nil {
		uid, gid = l.owner.uid, l.owner.gid
	}
	return l.meta(target, fi, uid, gid)
}
