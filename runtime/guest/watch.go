package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// MaxWatchDirs bounds the directories one recursive watch follows. The
// events are bounded by sandbox.MaxWatchQueue: gVisor's inotify queue has
// no limit of its own (no IN_Q_OVERFLOW), so the agent reads it at once
// into a queue of its own and ends a watch whose client falls that far
// behind.
const MaxWatchDirs = 4096

// errWatchOverflow ends a watch whose client fell sandbox.MaxWatchQueue events
// behind.
var errWatchOverflow = fmt.Errorf("watch: more than %d events not yet read by the client; events were lost", sandbox.MaxWatchQueue)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watch streams the changes under req.Path (every level below it with
// req.Recursive) as one JSON sandbox.WatchEvent per stdout frame, until the client
// closes the connection or the directory goes away.
func (s *Server) watch(c *conn, req Request) sandbox.Exit {
	if req.Path == "" {
		return sandbox.Exit{Code: 125, Error: "watch: no path", Kind: sandbox.KindInvalid}
	}
	root := s.resolve(req.Path)
	fi, err := os.Stat(root)
	if err != nil {
		return fileExit(err)
	}
	if !fi.IsDir() {
		return sandbox.Exit{Code: 1, Error: fmt.Sprintf("watch %s: not a directory", root), Kind: sandbox.KindInvalid}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fileExit(fmt.Errorf("watch %s: inotify: %w", root, err))
	}
	// Non-blocking, so reads wait in the runtime's poller and Close ends
	// them.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fileExit(fmt.Errorf("watch %s: inotify: %w", root, err))
	}
	w := newWatcher(rc, root, req.Recursive)
	if err := w.add("", nil); err != nil {
		return watchExit(err)
	}
	if err := c.writeJSON(frameStdout, sandbox.WatchEvent{}); err != nil {
		return sandbox.Exit{}
	}

	// The client ends the watch by closing the connection.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, _, err := c.read(); err != nil {
				cancel()
				f.Close()
				return
			}
		}
	}()
	queue := make(chan sandbox.WatchEvent, sandbox.MaxWatchQueue)
	sendErr := make(chan error, 1)
	go func() {
		for ev := range queue {
			if err := c.writeJSON(frameStdout, ev); err != nil {
				sendErr <- err
				cancel()
				f.Close()
				for range queue {
				}
				return
			}
		}
		sendErr <- nil
	}()
	err = w.run(ctx, f, func(ev sandbox.WatchEvent) error {
		select {
		case queue <- ev:
			return nil
		default:
			return errWatchOverflow
		}
	})
	close(queue)
	if serr := <-sendErr; serr != nil || ctx.Err() != nil {
		return sandbox.Exit{} // the client is gone: nobody reads the answer
	}
	return watchExit(err)
}

func watchExit(err error) sandbox.Exit {
	switch {
	case err == nil:
		return sandbox.Exit{}
	case errors.Is(err, errWatchOverflow), errors.Is(err, errTooManyDirs):
		return sandbox.Exit{Code: 1, Error: err.Error(), Kind: sandbox.KindIO}
	}
	return fileExit(err)
}

var errTooManyDirs = fmt.Errorf("watch: more than %d directories", MaxWatchDirs)

// watcher follows one directory (and, recursively, those below it) with
// one inotify instance.
type watcher struct {
	// fd is the inotify instance, used through Control: the client's
	// leaving closes it from another goroutine.
	fd        syscall.RawConn
	root      string
	recursive bool
	dirs      map[int32]string // watch descriptor → directory relative to root ("" is root)
	wds       map[string]int32
	// moved holds the cookies of renames away from the agent's own
	// temporary upload files (writeFile): their arrival is the upload.
	moved map[uint32]bool
	// scanned holds entries a new directory's scan reported as created: one
	// made between its watch and its scan is reported by both, and its
	// inotify create is dropped. Bounded: past sandbox.MaxWatchQueue it starts
	// over (a duplicate create then, never a missed one).
	scanned map[string]bool
}

func newWatcher(fd syscall.RawConn, root string, recursive bool) *watcher {
	return &watcher{fd: fd, root: root, recursive: recursive, dirs: map[int32]string{}, wds: map[string]int32{},
		moved: map[uint32]bool{}, scanned: map[string]bool{}}
}

// add watches the directory rel and, recursively, those below it. With
// found, entries found below it are added to it as created: they appeared
// before the watch on rel was in place (mkdir -p, an extracted archive).
func (w *watcher) add(rel string, found *[]sandbox.WatchEvent) error {
	if len(w.dirs) >= MaxWatchDirs {
		return errTooManyDirs
	}
	p := filepath.Join(w.root, rel)
	mask := uint32(watchMask)
	if rel != "" {
		mask |= unix.IN_DONT_FOLLOW
	}
	var (
		wd  int
		err error
	)
	cerr := w.fd.Control(func(fd uintptr) { wd, err = unix.InotifyAddWatch(int(fd), p, mask) })
	if cerr != nil {
		return cerr // closed: the watch is ending
	}
	if err != nil {
		if rel != "" && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)) {
			return nil // gone again already
		}
		return &fs.PathError{Op: "watch", Path: p, Err: err}
	}
	if old, ok := w.dirs[int32(wd)]; ok {
		delete(w.wds, old) // the same directory, moved
	}
	w.dirs[int32(wd)], w.wds[rel] = rel, int32(wd)
	if !w.recursive {
		return nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil // removed meanwhile: its parent reports that
	}
	for _, e := range ents {
		name := filepath.Join(rel, e.Name())
		if found != nil && !isUploadTemp(e.Name()) {
			*found = append(*found, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: name})
			if len(w.scanned) >= sandbox.MaxWatchQueue {
				clear(w.scanned)
			}
			w.scanned[name] = true
		}
		if e.IsDir() {
			if err := w.add(name, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// drop stops watching rel and the directories below it.
func (w *watcher) drop(rel string) {
	for d, wd := range w.wds {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			w.fd.Control(func(fd uintptr) { unix.InotifyRmWatch(int(fd), uint32(wd)) })
			delete(w.wds, d)
			delete(w.dirs, wd)
		}
	}
}

// run reads events until f is closed or the watched directory goes away,
// handing each to emit.
func (w *watcher) run(ctx context.Context, f *os.File, emit func(sandbox.WatchEvent) error) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: %w", w.root, err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := strings.TrimRight(string(nameBytes), "\x00")
			done, err := w.handle(ev.Wd, ev.Mask, ev.Cookie, name, emit)
			if err != nil || done {
				return err
			}
		}
	}
}

// handle turns one inotify event into watch events; done is set once the
// watched directory itself is gone.
func (w *watcher) handle(wd int32, mask, cookie uint32, name string, emit func(sandbox.WatchEvent) error) (done bool, err error) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		return true, errWatchOverflow
	}
	dir, ok := w.dirs[wd]
	if !ok {
		return false, nil // a watch dropped since
	}
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
		if dir == "" {
			return true, &fs.PathError{Op: "watch", Path: w.root, Err: fmt.Errorf("the watched directory was removed or moved: %w", fs.ErrNotExist)}
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, wd)
			if w.wds[dir] == wd {
				delete(w.wds, dir)
			}
		}
		return false, nil
	}
	rel := filepath.Join(dir, name)
	isDir := mask&unix.IN_ISDIR != 0
	if isUploadTemp(name) {
		if mask&unix.IN_MOVED_FROM != 0 {
			w.moved[cookie] = true
		}
		return false, nil
	}
	if mask&unix.IN_CREATE != 0 && w.scanned[rel] {
		delete(w.scanned, rel) // reported, and watched, by its parent's scan
		return false, nil
	}
	if mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 {
		delete(w.scanned, rel) // a create of the name from now on is news
	}
	var ops []string
	switch {
	case mask&unix.IN_CREATE != 0:
		ops = []string{sandbox.WatchCreate}
	case mask&unix.IN_MOVED_TO != 0 && w.moved[cookie]:
		// An upload's temporary file renamed into place: to a watcher
		// that is the file being written.
		delete(w.moved, cookie)
		ops = []string{sandbox.WatchCreate, sandbox.WatchWrite}
	case mask&unix.IN_MOVED_TO != 0:
		ops = []string{sandbox.WatchCreate}
	case mask&unix.IN_MOVED_FROM != 0:
		ops = []string{sandbox.WatchRename}
		if isDir && w.recursive {
			w.drop(rel)
		}
	case mask&unix.IN_MODIFY != 0:
		ops = []string{sandbox.WatchWrite}
	case mask&unix.IN_DELETE != 0:
		ops = []string{sandbox.WatchRemove}
	case mask&unix.IN_ATTRIB != 0:
		ops = []string{sandbox.WatchChmod}
	}
	// A new directory is watched before anything about it goes out, so a
	// client acting on the event finds it watched; what it already held
	// follows its own create.
	var found []sandbox.WatchEvent
	switch {
	case isDir && w.recursive && mask&unix.IN_CREATE != 0:
		err = w.add(rel, &found)
	case isDir && w.recursive && mask&unix.IN_MOVED_TO != 0:
		err = w.add(rel, nil) // moved in whole: only the move is news
	}
	if err != nil {
		return false, err
	}
	for _, op := range ops {
		if err := emit(sandbox.WatchEvent{Op: op, Name: rel}); err != nil {
			return false, err
		}
	}
	for _, ev := range found {
		if err := emit(ev); err != nil {
			return false, err
		}
	}
	return false, nil
}

// uploadTempMarker is in the name of every temporary file writeFile makes.
const uploadTempMarker = ".smolvm-"

// isUploadTemp reports whether name is one of writeFile's temporary files.
func isUploadTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, uploadTempMarker)
}

// Watch follows the directory path (and every level below it when
// recursive) inside the sandbox, calling fn with each change until ctx
// ends, fn fails or the directory goes away. The first call has an empty
// Op: the watch is in place. A missing directory fails before any call
// (errdefs.ErrNotFound).
func (c *Client) Watch(ctx context.Context, path string, recursive bool, fn func(sandbox.WatchEvent) error) error {
	ew := &eventWriter{fn: fn}
	err := opErr(c.do(ctx, Request{Op: OpWatch, Path: path, Recursive: recursive}, &sandbox.Stdio{Stdout: ew}))
	if ew.err != nil {
		return ew.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// eventWriter decodes each stdout frame of a watch: one frame, one event.
type eventWriter struct {
	fn  func(sandbox.WatchEvent) error
	err error
}

func (e *eventWriter) Write(p []byte) (int, error) {
	var ev sandbox.WatchEvent
	if err := json.Unmarshal(p, &ev); err != nil {
		e.err = fmt.Errorf("%w: bad watch event: %v", ErrUnavailable, err)
		return 0, e.err
	}
	if err := e.fn(ev); err != nil {
		e.err = err
		return 0, err
	}
	return len(p), nil
}
