package cli

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// leakWatch learns which sandboxes a data dir has had, so that a test can
// check, once they are removed, that nothing of theirs is left on the
// host: sandbox and network directories, processes, mounts (the network
// namespaces' pins among them) and cgroups.
//
// cgroup parents (/sys/fs/cgroup/*/smolvm) are shared by every smolvm on
// the host, other tests' included, so a diff of them before and after
// would blame others' sandboxes: only the cgroups of IDs this data dir
// had count. The watch reads them from the sandbox directories made in
// the data dir, with inotify, so that a create cut short within
// milliseconds (a crash, a rollback) is seen too.
type leakWatch struct {
	dir  string
	file *os.File
	done chan struct{}

	mu       sync.Mutex
	ids      map[string]bool
	overflow bool
	// reported are the leaks check has failed the test for: one that
	// stays is not reported again.
	reported map[string]bool
}

// leakSettle is how long check waits for leftovers to go before it calls
// them leaks: a killed runsc's children and its gofer exit a little
// after the removal that killed them has answered.
const leakSettle = 5 * time.Second

// watchLeaks starts watching dir, a data dir, until the test ends. Call
// it before anything creates sandboxes there.
func watchLeaks(t *testing.T, dir string) *leakWatch {
	t.Helper()
	sandboxes := filepath.Join(dir, "sandboxes")
	if err := os.MkdirAll(sandboxes, 0o700); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, sandboxes, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		t.Fatalf("inotify watch %s: %v", sandboxes, err)
	}
	// Non-blocking, so that reads go through the runtime's poller and
	// Close ends the one in progress.
	w := &leakWatch{dir: dir, file: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), ids: map[string]bool{}, reported: map[string]bool{}}
	go w.read()
	t.Cleanup(func() {
		w.file.Close()
		<-w.done
	})
	return w
}

// read records the names of the entries made in the sandboxes directory.
func (w *leakWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+size], "\x00"))
			if mask&unix.IN_Q_OVERFLOW != 0 {
				w.overflow = true
			} else if name != "" {
				w.ids[name] = true
			}
			off += unix.SizeofInotifyEvent + size
		}
		w.mu.Unlock()
	}
}

// check fails t for anything of the data dir's sandboxes left on the
// host but what the sandboxes in keep (IDs; nil: none) hold.
func (w *leakWatch) check(t *testing.T, keep map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(leakSettle)
	left := w.leftovers(keep)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left = w.leftovers(keep)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range left {
		if !w.reported[l] {
			t.Errorf("leak: %s", l)
		}
		w.reported[l] = true
	}
	if w.overflow && !w.reported["overflow"] {
		t.Error("the inotify queue overflowed: sandboxes may have gone unseen")
		w.reported["overflow"] = true
	}
}

// leftovers lists what check would call leaks now.
func (w *leakWatch) leftovers(keep map[string]bool) []string {
	var left []string
	for _, sub := range []string{"sandboxes", "net"} {
		entries, _ := os.ReadDir(filepath.Join(w.dir, sub))
		for _, e := range entries {
			if !keep[e.Name()] {
				left = append(left, "directory "+filepath.Join(sub, e.Name()))
			}
		}
	}
	for pid, args := range cmdlines(w.dir + "/") {
		if !w.kept(strings.Join(args, " "), keep) {
			left = append(left, "process "+pid+": "+strings.Join(args, " "))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, w.dir+"/") && !w.kept(line, keep) {
			left = append(left, "mount "+line)
		}
	}
	return append(left, w.cgroups(keep)...)
}

// kept reports whether s names a path of a sandbox in keep (its
// directory, or its network's).
func (w *leakWatch) kept(s string, keep map[string]bool) bool {
	for _, sub := range []string{"sandboxes", "net"} {
		_, rest, ok := strings.Cut(s, filepath.Join(w.dir, sub)+"/")
		if id, _, _ := strings.Cut(rest, "/"); ok && keep[id] {
			return true
		}
	}
	return false
}

// cgroups lists the cgroups left of the sandboxes the data dir had, but
// keep's, under every hierarchy's smolvm parent (v1's controllers and the
// hybrid host's cgroup2 at /sys/fs/cgroup/unified; v2's one).
func (w *leakWatch) cgroups(keep map[string]bool) []string {
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/smolvm")
	if v2, err := os.Stat("/sys/fs/cgroup/smolvm"); err == nil && v2.IsDir() {
		parents = append(parents, "/sys/fs/cgroup/smolvm")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var left []string
	for _, parent := range parents {
		for id := range w.ids {
			if _, err := os.Stat(filepath.Join(parent, id)); !keep[id] && !errors.Is(err, os.ErrNotExist) {
				left = append(left, "cgroup "+filepath.Join(parent, id))
			}
		}
	}
	slices.Sort(left)
	return left
}

// cmdlines returns the arguments of the processes with an argument
// containing s, by pid.
func cmdlines(s string) map[string][]string {
	entries, _ := os.ReadDir("/proc")
	found := map[string][]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		found[e.Name()] = strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	}
	return found
}
