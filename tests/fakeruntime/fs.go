package fakeruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// memFS is a sandbox's file system in memory: a sandbox.FS whose
// refusals are *sandbox.OpError of the kinds the real agent gives
// (TestFSLikeTheAgent holds them to it).
type memFS struct {
	mu       sync.Mutex
	nodes    map[string]*node // by clean absolute path
	watchers map[*watcher]bool
}

type node struct {
	dir   bool
	data  []byte
	mode  iofs.FileMode
	mtime time.Time
}

// watcher is one Watch: the events under dir (every level below it when
// recursive), queued for the caller up to sandbox.MaxWatchQueue.
type watcher struct {
	dir       string
	recursive bool
	events    chan sandbox.WatchEvent
	overflow  chan struct{}
}

var _ sandbox.FS = (*memFS)(nil)

func newFS() *memFS {
	now := time.Now().UTC()
	fs := &memFS{nodes: map[string]*node{}, watchers: map[*watcher]bool{}}
	for _, d := range []string{"/", "/tmp", "/home", "/home/user", "/etc"} {
		fs.nodes[d] = &node{dir: true, mode: iofs.ModeDir | 0o755, mtime: now}
	}
	for p, data := range map[string]string{"/etc/hostname": "fake\n", "/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"} {
		fs.nodes[p] = &node{data: []byte(data), mode: 0o644, mtime: now}
	}
	return fs
}

// clone copies the files, not the watches.
func (fs *memFS) clone() *memFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c := &memFS{nodes: map[string]*node{}, watchers: map[*watcher]bool{}}
	for p, n := range fs.nodes {
		cp := *n
		cp.data = bytes.Clone(n.data)
		c.nodes[p] = &cp
	}
	return c
}

// refuse is the agent's answer to an operation it cannot perform.
func refuse(kind, format string, args ...any) error {
	return &sandbox.OpError{Exit: sandbox.Exit{Code: 1, Error: fmt.Sprintf(format, args...), Kind: kind}}
}

// clean checks that p is absolute and cleans it.
func clean(op, p string) (string, error) {
	if !path.IsAbs(p) {
		return "", refuse(sandbox.KindInvalid, "%s %s: not an absolute path", op, p)
	}
	return path.Clean(p), nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func (fs *memFS) info(p string, n *node) sandbox.FileInfo {
	fi := sandbox.FileInfo{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(n.data)), Mode: uint32(n.mode.Perm()), Perm: n.mode.String(), ModTime: n.mtime}
	if n.dir {
		fi.Type, fi.Size = "dir", 0
	}
	return fi
}

// get returns the node at p. fs.mu is held.
func (fs *memFS) get(op, p string) (string, *node, error) {
	p, err := clean(op, p)
	if err != nil {
		return "", nil, err
	}
	n, ok := fs.nodes[p]
	if !ok {
		return "", nil, refuse(sandbox.KindNotFound, "%s %s: no such file or directory", op, p)
	}
	return p, n, nil
}

func (fs *memFS) Stat(_ context.Context, p string) (sandbox.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p, n, err := fs.get("stat", p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return fs.info(p, n), nil
}

func (fs *memFS) List(_ context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p, n, err := fs.get("list", p)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, refuse(sandbox.KindInvalid, "list %s: not a directory", p)
	}
	depth = max(depth, 1)
	out := []sandbox.FileInfo{}
	for q, m := range fs.nodes {
		rel := strings.TrimPrefix(strings.TrimPrefix(q, p), "/")
		if q != p && under(q, p) && strings.Count(rel, "/") < depth {
			out = append(out, fs.info(q, m))
		}
	}
	slices.SortFunc(out, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// mkdirAll makes p and its parents. fs.mu is held.
func (fs *memFS) mkdirAll(p string) error {
	for _, d := range parents(p) {
		n, ok := fs.nodes[d]
		if ok && !n.dir {
			return refuse(sandbox.KindInvalid, "mkdir %s: not a directory", d)
		}
		if !ok {
			fs.nodes[d] = &node{dir: true, mode: iofs.ModeDir | 0o755, mtime: time.Now().UTC()}
			fs.notify(sandbox.WatchCreate, d)
		}
	}
	return nil
}

// parents lists p's ancestors and p itself, from the root down.
func parents(p string) []string {
	var out []string
	for d := p; d != "/"; d = path.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

func (fs *memFS) Mkdir(_ context.Context, p string) (sandbox.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p, err := clean("mkdir", p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if _, ok := fs.nodes[p]; ok {
		return sandbox.FileInfo{}, refuse(sandbox.KindExists, "mkdir %s: file already exists", p)
	}
	if err := fs.mkdirAll(p); err != nil {
		return sandbox.FileInfo{}, err
	}
	return fs.info(p, fs.nodes[p]), nil
}

func (fs *memFS) Rename(_ context.Context, from, to string) (sandbox.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	from, _, err := fs.get("rename", from)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	to, err = clean("rename", to)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if under(to, from) && to != from {
		return sandbox.FileInfo{}, refuse(sandbox.KindIO, "rename %s %s: invalid argument", from, to)
	}
	if parent, ok := fs.nodes[path.Dir(to)]; !ok || !parent.dir {
		return sandbox.FileInfo{}, refuse(sandbox.KindNotFound, "rename %s %s: no such file or directory", from, to)
	}
	moved := map[string]*node{}
	for q, n := range fs.nodes {
		if under(q, from) {
			moved[to+strings.TrimPrefix(q, from)] = n
			delete(fs.nodes, q)
		}
	}
	maps.Copy(fs.nodes, moved)
	fs.notify(sandbox.WatchRename, from)
	fs.notify(sandbox.WatchCreate, to)
	return fs.info(to, fs.nodes[to]), nil
}

func (fs *memFS) Remove(_ context.Context, p string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	p, _, err := fs.get("remove", p)
	if err != nil {
		return err
	}
	if p == "/" {
		return refuse(sandbox.KindIO, "remove /: device or resource busy")
	}
	for q := range fs.nodes {
		if under(q, p) {
			delete(fs.nodes, q)
		}
	}
	fs.notify(sandbox.WatchRemove, p)
	return nil
}

func (fs *memFS) ReadFile(_ context.Context, p string, w io.Writer) error {
	fs.mu.Lock()
	p, n, err := fs.get("read", p)
	var data []byte
	if err == nil && n.dir {
		err = refuse(sandbox.KindIO, "read %s: is a directory", p)
	}
	if err == nil {
		data = n.data
	}
	fs.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (fs *memFS) WriteFile(_ context.Context, p string, r io.Reader) (sandbox.FileInfo, error) {
	p, err := clean("write", p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	// The agent makes the parents before it reads the upload, and keeps
	// them when the upload fails.
	fs.mu.Lock()
	err = fs.mkdirAll(path.Dir(p))
	fs.mu.Unlock()
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("read upload: %w", err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.write(p, data, 0o644)
}

// write stores a file at the clean path p. fs.mu is held.
func (fs *memFS) write(p string, data []byte, mode iofs.FileMode) (sandbox.FileInfo, error) {
	if n, ok := fs.nodes[p]; ok && n.dir {
		return sandbox.FileInfo{}, refuse(sandbox.KindIO, "write %s: is a directory", p)
	}
	if err := fs.mkdirAll(path.Dir(p)); err != nil {
		return sandbox.FileInfo{}, err
	}
	if _, ok := fs.nodes[p]; !ok {
		fs.notify(sandbox.WatchCreate, p)
	}
	fs.nodes[p] = &node{data: data, mode: mode.Perm(), mtime: time.Now().UTC()}
	fs.notify(sandbox.WatchWrite, p)
	return fs.info(p, fs.nodes[p]), nil
}

// notify queues op on p for every watch that sees it; a watch whose
// caller fell sandbox.MaxWatchQueue events behind ends. fs.mu is held.
func (fs *memFS) notify(op, p string) {
	for w := range fs.watchers {
		if p == w.dir || !under(p, w.dir) {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, w.dir), "/")
		if !w.recursive && strings.Contains(rel, "/") {
			continue
		}
		select {
		case w.events <- sandbox.WatchEvent{Op: op, Name: rel}:
		default:
			delete(fs.watchers, w)
			close(w.overflow)
		}
	}
}

func (fs *memFS) Watch(ctx context.Context, p string, recursive bool, fn func(sandbox.WatchEvent) error) error {
	fs.mu.Lock()
	p, n, err := fs.get("watch", p)
	if err == nil && !n.dir {
		err = refuse(sandbox.KindInvalid, "watch %s: not a directory", p)
	}
	w := &watcher{dir: p, recursive: recursive, events: make(chan sandbox.WatchEvent, sandbox.MaxWatchQueue), overflow: make(chan struct{})}
	if err == nil {
		fs.watchers[w] = true
	}
	fs.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		fs.mu.Lock()
		delete(fs.watchers, w)
		fs.mu.Unlock()
	}()
	if err := fn(sandbox.WatchEvent{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-w.events:
			if err := fn(ev); err != nil {
				return err
			}
		case <-w.overflow:
			return fmt.Errorf("watch: more than %d events not yet read by the client; events were lost", sandbox.MaxWatchQueue)
		}
	}
}

// putTar extracts a tar stream at dst, a directory.
func (fs *memFS) putTar(dst string, r io.Reader) error {
	dst, err := clean("cp", dst)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cp to %s: %w", dst, err)
		}
		p := path.Join(dst, h.Name)
		if !under(p, dst) {
			return refuse(sandbox.KindInvalid, "cp to %s: %s leaves it", dst, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = fs.mkdirAll(p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				_, err = fs.write(p, data, iofs.FileMode(h.Mode))
			}
		default:
			err = refuse(sandbox.KindInvalid, "cp to %s: %s: the fake keeps only files and directories", dst, h.Name)
		}
		if err != nil {
			return err
		}
	}
}

// getTar writes src and what is below it as a tar stream, named from
// src's base name.
func (fs *memFS) getTar(src string, w io.Writer) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	src, _, err := fs.get("cp", src)
	if err != nil {
		return err
	}
	var paths []string
	for q := range fs.nodes {
		if under(q, src) {
			paths = append(paths, q)
		}
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, q := range paths {
		n := fs.nodes[q]
		name := path.Join(path.Base(src), strings.TrimPrefix(q, src))
		h := &tar.Header{Name: name, Mode: int64(n.mode.Perm()), ModTime: n.mtime, Typeflag: tar.TypeReg, Size: int64(len(n.data))}
		if n.dir {
			h.Name, h.Typeflag, h.Size = name+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(n.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
