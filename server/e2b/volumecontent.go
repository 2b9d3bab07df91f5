package e2b

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// E2B's volume content API (/volumecontent/{volume}/dir|path|file) reads
// and writes a volume's files from the host, through an os.Root on the
// volume's mount: a link a sandbox made there resolves within the volume,
// and one leading out of it is refused (403), never followed. It takes
// the volume's own token (GET /volumes/{id} gives it), not an API key.

// Bounds of a directory listing.
const (
	maxListDepth   = 16
	maxListEntries = 10_000
)

// volumeToken is the token of the content API for v: derived from the
// server's key, the volume's tenant, name and creation, so that a volume
// made again under the same name has another.
func (h *Handler) volumeToken(v *sandbox.Volume) string {
	return h.envdToken(fmt.Sprintf("volume\x00%s\x00%s\x00%d", v.Tenant, v.Name, v.CreatedAt.UnixMilli()))
}

// volumeEntry is E2B's VolumeEntryStat.
type volumeEntry struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// serveVolumeContent answers /volumecontent/…: the volume is the one
// whose token the request carries, in whichever tenant has it; without
// one, a wrong one or for a missing volume, the answer is the same 401.
func (h *Handler) serveVolumeContent(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/volumecontent/")
	name, op, _ := strings.Cut(rest, "/")
	v, ok := h.volumeOf(r, name)
	if !ok {
		writeAPIError(w, http.StatusUnauthorized, "missing or invalid volume token")
		return
	}
	r = r.WithContext(tenant.With(r.Context(), v.Tenant))
	if err := httpguard.Path(r); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	release, err := h.acquire(r, v.Tenant)
	if err != nil {
		httpguard.RefuseBusy(w, err, writeAPIError)
		return
	}
	defer release()
	p, err := volumePath(r.URL.Query().Get("path"))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	root, err := h.m.VolumeRoot(r.Context(), v.Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer root.Close()
	var out any
	switch r.Method + " " + op {
	case "GET dir":
		out, err = listVolume(root, p, r.URL.Query().Get("depth"))
	case "POST dir":
		out, err = makeVolumeDir(root, p, r.URL.Query())
	case "GET path":
		out, err = statVolume(root, p)
	case "PATCH path":
		out, err = patchVolume(r, root, p)
	case "GET file":
		err = readVolumeFile(w, root, p)
		if err == nil {
			return
		}
	case "PUT file":
		out, err = h.writeVolumeFile(r, root, p)
	case "DELETE path":
		if p == "." {
			err = fmt.Errorf("%w: path: the volume's root cannot be removed", sandbox.ErrInvalid)
		} else if _, err = root.Lstat(p); err == nil {
			err = root.RemoveAll(p)
		}
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	default:
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("%s %s: no such volume content route", r.Method, r.URL.Path))
		return
	}
	if err != nil {
		writeVolumeError(w, p, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// volumeOf finds the volume name whose token r carries, in any tenant.
func (h *Handler) volumeOf(r *http.Request, name string) (*sandbox.Volume, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || names.Check(names.Volume, name) != nil {
		return nil, false
	}
	// Unscoped: the token, not a key, says whose volume it is.
	vs, err := h.m.ListVolumes(context.WithoutCancel(context.Background()))
	if err != nil {
		return nil, false
	}
	for _, v := range vs {
		if v.Name == name && hmac.Equal([]byte(token), []byte(h.volumeToken(v))) {
			return v, true
		}
	}
	return nil, false
}

// volumePath turns E2B's path ("/a/b", "a/b", "/") into one relative to
// the volume's root: "." for the root; ".." is refused.
func volumePath(p string) (string, error) {
	rel := strings.TrimLeft(p, "/")
	if rel == "" {
		return ".", nil
	}
	if err := names.CheckPath(rel); err != nil {
		return "", err
	}
	return path.Clean(rel), nil
}

// writeVolumeError answers err about path p: a missing path 404, a link
// leading out of the volume 403.
func writeVolumeError(w http.ResponseWriter, p string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("path /%s: not found", strings.TrimPrefix(p, ".")))
	case strings.Contains(err.Error(), "path escapes from parent"):
		writeAPIError(w, http.StatusForbidden, fmt.Sprintf("path /%s: leads out of the volume (a link)", p))
	default:
		writeErr(w, err)
	}
}

func entryOf(root *os.Root, p string, fi fs.FileInfo) volumeEntry {
	e := volumeEntry{Name: fi.Name(), Path: "/" + strings.TrimPrefix(p, "."), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UTC()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = root.Readlink(p)
	default:
		e.Type = "unknown"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	if p == "." {
		e.Name, e.Path = "/", "/"
	}
	return e
}

func statVolume(root *os.Root, p string) (volumeEntry, error) {
	fi, err := root.Lstat(p)
	if err != nil {
		return volumeEntry{}, err
	}
	return entryOf(root, p, fi), nil
}

// listVolume lists directory p down to depth levels (default 1), without
// following links.
func listVolume(root *os.Root, p, depth string) ([]volumeEntry, error) {
	d := 1
	if depth != "" {
		var err error
		if d, err = strconv.Atoi(depth); err != nil || d < 1 || d > maxListDepth {
			return nil, fmt.Errorf("%w: depth %q: want 1 to %d", sandbox.ErrInvalid, depth, maxListDepth)
		}
	}
	out := []volumeEntry{}
	var walk func(dir string, left int) error
	walk = func(dir string, left int) error {
		f, err := root.Open(dir)
		if err != nil {
			return err
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, ent := range ents {
			if len(out) >= maxListEntries {
				return fmt.Errorf("%w: more than %d entries: list a smaller depth", sandbox.ErrInvalid, maxListEntries)
			}
			child := path.Join(dir, ent.Name())
			fi, err := ent.Info()
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, entryOf(root, child, fi))
			if ent.IsDir() && left > 1 {
				if err := walk(child, left-1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if fi, err := root.Stat(p); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: path /%s: not a directory", sandbox.ErrInvalid, p)
	}
	return out, walk(p, d)
}

// ownership applies E2B's uid, gid and mode query or body values to p.
func ownership(root *os.Root, p string, uid, gid, mode string) error {
	if mode != "" {
		m, err := strconv.ParseUint(mode, 0, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("%w: mode %q", sandbox.ErrInvalid, mode)
		}
		if err := root.Chmod(p, fs.FileMode(m)&fs.ModePerm|fileModeBits(m)); err != nil {
			return err
		}
	}
	if uid == "" && gid == "" {
		return nil
	}
	id := func(s string) (int, error) {
		if s == "" {
			return -1, nil
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%w: uid/gid %q", sandbox.ErrInvalid, s)
		}
		return int(n), nil
	}
	u, err := id(uid)
	if err != nil {
		return err
	}
	g, err := id(gid)
	if err != nil {
		return err
	}
	return root.Lchown(p, u, g)
}

// fileModeBits maps the set-id and sticky bits of a Unix mode to Go's.
func fileModeBits(m uint64) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

func makeVolumeDir(root *os.Root, p string, q map[string][]string) (volumeEntry, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var err error
	if get("force") == "true" {
		err = root.MkdirAll(p, 0o755)
	} else {
		err = root.Mkdir(p, 0o755)
	}
	if err != nil {
		return volumeEntry{}, err
	}
	if err := ownership(root, p, get("uid"), get("gid"), get("mode")); err != nil {
		return volumeEntry{}, err
	}
	return statVolume(root, p)
}

func patchVolume(r *http.Request, root *os.Root, p string) (volumeEntry, error) {
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decodeBody(r, &body); err != nil {
		return volumeEntry{}, fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)
	}
	str := func(v *uint32) string {
		if v == nil {
			return ""
		}
		return strconv.FormatUint(uint64(*v), 10)
	}
	if err := ownership(root, p, str(body.UID), str(body.GID), str(body.Mode)); err != nil {
		return volumeEntry{}, err
	}
	return statVolume(root, p)
}

func readVolumeFile(w http.ResponseWriter, root *os.Root, p string) error {
	f, err := root.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: path /%s: not a regular file", sandbox.ErrInvalid, p)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	io.Copy(w, f)
	return nil
}

// writeVolumeFile creates or replaces file p with the body (at most the
// server's upload limit), making its parents.
func (h *Handler) writeVolumeFile(r *http.Request, root *os.Root, p string) (volumeEntry, error) {
	if p == "." {
		return volumeEntry{}, fmt.Errorf("%w: path: the volume's root is a directory", sandbox.ErrInvalid)
	}
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return volumeEntry{}, err
		}
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return volumeEntry{}, err
	}
	_, err = io.Copy(f, http.MaxBytesReader(nil, r.Body, h.maxUpload))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return volumeEntry{}, err
	}
	q := r.URL.Query()
	if err := ownership(root, p, q.Get("uid"), q.Get("gid"), q.Get("mode")); err != nil {
		return volumeEntry{}, err
	}
	return statVolume(root, p)
}
