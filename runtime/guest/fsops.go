package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"smolvm.dev/smolvm/sandbox"
)

// maxListDepth bounds a recursive listing so that one request cannot walk
// a whole file system into memory.
const maxListDepth = 16

// resolve makes p absolute: a relative path is taken from the sandbox's
// default working directory, where commands start too.
func (s *Server) resolve(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	s.mu.Lock()
	dir := s.cfg.Dir
	s.mu.Unlock()
	if dir == "" {
		dir = "/"
	}
	return filepath.Join(dir, p)
}

func fileInfo(p string, fi fs.FileInfo) sandbox.FileInfo {
	info := sandbox.FileInfo{
		Name: fi.Name(), Path: p, Size: fi.Size(), ModTime: fi.ModTime(),
		Mode: uint32(fi.Mode().Perm()),
	}
	kind := "?"
	switch {
	case fi.Mode().IsRegular():
		info.Type, kind = "file", "-"
	case fi.IsDir():
		info.Type, kind = "dir", "d"
	case fi.Mode()&fs.ModeSymlink != 0:
		info.Type, kind = "symlink", "l"
		info.Target, _ = os.Readlink(p)
	default:
		info.Type = "other"
	}
	// As ls prints it; FileMode.String uses Go's own letters (L, t).
	info.Perm = kind + fi.Mode().Perm().String()[1:]
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = st.Uid, st.Gid
	}
	return info
}

func lstatInfo(p string) (sandbox.FileInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return fileInfo(p, fi), nil
}

// fsOp runs one file system operation. Results go out as one JSON value on
// stdout; file contents (OpReadFile) go out raw.
func (s *Server) fsOp(c *conn, req Request) sandbox.Exit {
	if req.Path == "" {
		return sandbox.Exit{Code: 125, Error: req.Op + ": no path", Kind: sandbox.KindInvalid}
	}
	p := s.resolve(req.Path)
	var (
		out any
		err error
	)
	switch req.Op {
	case OpStat:
		out, err = lstatInfo(p)
	case OpList:
		out, err = list(p, req.Depth)
	case OpMkdir:
		if _, serr := os.Lstat(p); serr == nil {
			return sandbox.Exit{Code: 1, Error: fmt.Sprintf("mkdir %s: %v", p, fs.ErrExist), Kind: sandbox.KindExists}
		}
		if err = os.MkdirAll(p, 0o755); err == nil {
			out, err = lstatInfo(p)
		}
	case OpRemove:
		if _, err = os.Lstat(p); err == nil {
			err = os.RemoveAll(p)
		}
	case OpRename:
		if req.Dest == "" {
			return sandbox.Exit{Code: 125, Error: "rename: no destination", Kind: sandbox.KindInvalid}
		}
		dst := s.resolve(req.Dest)
		if err = os.Rename(p, dst); err == nil {
			out, err = lstatInfo(dst)
		}
	case OpWriteFile:
		out, err = writeFile(c, p)
	case OpReadFile:
		err = readFile(c, p)
	}
	if err != nil {
		return fileExit(err)
	}
	if out != nil {
		// A deep listing can exceed one frame: chunk it.
		b, err := json.Marshal(out)
		if err == nil {
			err = c.writeChunks(frameStdout, b)
		}
		if err != nil {
			return fileExit(err)
		}
	}
	return sandbox.Exit{}
}

// list returns the entries under dir, descending depth levels (at least 1).
func list(dir string, depth int) ([]sandbox.FileInfo, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list %s: %w", dir, syscall.ENOTDIR)
	}
	depth = max(1, min(depth, maxListDepth))
	var out []sandbox.FileInfo
	var walk func(d string, level int) error
	walk = func(d string, level int) error {
		ents, err := os.ReadDir(d)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			fi, err := e.Info()
			if err != nil {
				continue // removed while we listed
			}
			out = append(out, fileInfo(p, fi))
			if e.IsDir() && level < depth {
				if err := walk(p, level+1); err != nil && !errors.Is(err, fs.ErrPermission) {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(dir, 1)
}

// writeFile replaces p with the stdin stream, creating parent directories.
// It writes a temporary file and renames it, so a reader never sees half a
// file and a failed upload leaves the old one in place.
func writeFile(c *conn, p string) (sandbox.FileInfo, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return sandbox.FileInfo{}, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+uploadTempMarker+"*")
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p); err == nil {
		mode = fi.Mode().Perm()
	}
	werr := copyStdin(c, f)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return sandbox.FileInfo{}, werr
	}
	if err := os.Chmod(f.Name(), mode); err != nil {
		return sandbox.FileInfo{}, err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return sandbox.FileInfo{}, err
	}
	return lstatInfo(p)
}

// copyStdin writes stdin frames to w until the client's EOF frame, or
// fails at its abort frame.
func copyStdin(c *conn, w io.Writer) error {
	for {
		typ, b, err := c.read()
		if err != nil {
			return fmt.Errorf("upload interrupted: %w", err)
		}
		switch typ {
		case frameStdin:
			if _, err := w.Write(b); err != nil {
				return err
			}
		case frameStdinEOF:
			return nil
		case frameStdinAbort:
			return errors.New("upload abandoned by the client")
		}
	}
}

func readFile(c *conn, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.IsDir() {
		return fmt.Errorf("read %s: %w", p, syscall.EISDIR)
	}
	_, err = io.Copy(frameWriter{c, frameStdout}, f)
	return err
}

// decodeJSON reads the single JSON value an fs op wrote.
func decodeJSON(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: bad reply: %v", ErrUnavailable, strings.TrimSpace(err.Error()))
	}
	return nil
}
