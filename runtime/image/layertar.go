package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WriteLayer writes dir, a layer in overlayfs form (a store's extracted
// layer, or a sandbox's upper directory), as an OCI layer tar: 0/0
// character devices become whiteouts, opaque directories get their
// opaque whiteout. skip, if set, leaves out entries by path relative to
// dir (a directory's header only: its entries are still walked).
//
// The output depends on the files alone (lexical order, times cut to
// seconds, no user or group names), so a layer written from what
// extracting it made has the same diffID again.
func WriteLayer(w io.Writer, dir string, skip func(rel string) bool) error {
	tw := tar.NewWriter(w)
	links := map[uint64]string{} // inode → first name, to keep hard links
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel) {
			return nil
		}
		return layerEntry(tw, p, rel, links)
	})
	if err != nil {
		return fmt.Errorf("write layer %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write layer %s: %w", dir, err)
	}
	return nil
}

// layerEntry writes one file of a layer directory.
func layerEntry(tw *tar.Writer, p, rel string, links map[uint64]string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return nil // devices are never unpacked (extract)
		}
		dir, base := filepath.Split(rel)
		return tw.WriteHeader(&tar.Header{Name: dir + whiteoutPrefix + base, Typeflag: tar.TypeReg, ModTime: hdr.ModTime})
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		if err := writeXattrs(hdr, p); err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if opaque(p) {
			return tw.WriteHeader(&tar.Header{Name: rel + "/" + whiteoutOpaque, Typeflag: tar.TypeReg, ModTime: hdr.ModTime})
		}
		return nil
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		return regularEntry(tw, hdr, p, st, links)
	}
	return nil // sockets: nothing to carry
}

// regularEntry writes a regular file, or a hard link to its first name.
func regularEntry(tw *tar.Writer, hdr *tar.Header, p string, st unix.Stat_t, links map[uint64]string) error {
	if st.Nlink > 1 {
		if first, ok := links[st.Ino]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return tw.WriteHeader(hdr)
		}
		links[st.Ino] = hdr.Name
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := writeXattrs(hdr, p); err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, st.Size)
	return err
}

// writeXattrs records the extended attributes that extraction keeps.
func writeXattrs(hdr *tar.Header, p string) error {
	names, err := listXattrs(p)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !keptXattr(n) {
			continue
		}
		v, err := getXattr(p, n)
		if err != nil {
			return err
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+n] = string(v)
	}
	return nil
}

func opaque(p string) bool {
	v, err := getXattr(p, opaqueXattr)
	return err == nil && string(v) == "y"
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("xattrs of %s: %w", p, err)
		}
		var out []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
