package guest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// watchEvents starts a watch on dir and returns its events as they come
// and its end.
func watchEvents(t *testing.T, c *Client, dir string, recursive bool) (<-chan sandbox.WatchEvent, <-chan error, context.CancelFunc) {
	t.Helper()
	events := make(chan sandbox.WatchEvent, 1024)
	done, cancel := startWatch(t, c, dir, recursive, func(ev sandbox.WatchEvent) { events <- ev })
	return events, done, cancel
}

// startWatch starts a watch on dir that hands events to fn, and returns
// once it is in place.
func startWatch(t *testing.T, c *Client, dir string, recursive bool, fn func(sandbox.WatchEvent)) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done, ready := make(chan error, 1), make(chan struct{})
	go func() {
		done <- c.Watch(ctx, dir, recursive, func(ev sandbox.WatchEvent) error {
			if ev.Op == "" {
				close(ready)
				return nil
			}
			fn(ev)
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("watch %s: %v", dir, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watch never started")
	}
	return done, cancel
}

// expect reads events until each of want has been seen.
func expect(t *testing.T, events <-chan sandbox.WatchEvent, want ...sandbox.WatchEvent) {
	t.Helper()
	missing := map[sandbox.WatchEvent]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var seen []sandbox.WatchEvent
	timeout := time.After(5 * time.Second)
	for len(missing) > 0 {
		select {
		case ev := <-events:
			seen = append(seen, ev)
			delete(missing, ev)
		case <-timeout:
			t.Fatalf("missing %v; saw %v", missing, seen)
		}
	}
}

func TestWatch(t *testing.T) {
	c, _ := startAgent(t, nil)
	ctx := context.Background()
	dir := t.TempDir()
	events, done, cancel := watchEvents(t, c, dir, true)

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x"), 0o644))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "a.txt"}, sandbox.WatchEvent{Op: sandbox.WatchWrite, Name: "a.txt"})
	// A directory made with its contents at once: what was there before
	// its watch is reported too.
	must(os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "d"}, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "d/e"})
	must(os.WriteFile(filepath.Join(dir, "d", "e", "deep.txt"), []byte("y"), 0o644))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "d/e/deep.txt"}, sandbox.WatchEvent{Op: sandbox.WatchWrite, Name: "d/e/deep.txt"})
	must(os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "d", "b.txt")))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchRename, Name: "a.txt"}, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "d/b.txt"})
	must(os.Chmod(filepath.Join(dir, "d", "b.txt"), 0o600))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchChmod, Name: "d/b.txt"})
	must(os.Remove(filepath.Join(dir, "d", "b.txt")))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchRemove, Name: "d/b.txt"})
	// A directory moved within the tree is followed under its new name.
	must(os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "moved")))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchRename, Name: "d"}, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "moved"})
	must(os.WriteFile(filepath.Join(dir, "moved", "e", "n.txt"), nil, 0o644))
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "moved/e/n.txt"})

	// An upload (a temporary file renamed into place) is a create and a
	// write of its own name; the temporary file never shows.
	_, err := c.WriteFile(ctx, filepath.Join(dir, "up.txt"), strings.NewReader("data"))
	must(err)
	expect(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "up.txt"}, sandbox.WatchEvent{Op: sandbox.WatchWrite, Name: "up.txt"})
	must(os.WriteFile(filepath.Join(dir, "last"), nil, 0o644))
	for ev := range drainUntil(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "last"}) {
		if strings.Contains(ev.Name, uploadTempMarker) {
			t.Fatalf("the upload's temporary file showed: %+v", ev)
		}
	}

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled watch ended with %v", err)
	}
}

// drainUntil returns the events up to and including last.
func drainUntil(t *testing.T, events <-chan sandbox.WatchEvent, last sandbox.WatchEvent) map[sandbox.WatchEvent]bool {
	t.Helper()
	seen := map[sandbox.WatchEvent]bool{}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			seen[ev] = true
			if ev == last {
				return seen
			}
		case <-timeout:
			t.Fatalf("no %v; saw %v", last, seen)
		}
	}
}

func TestWatchNotRecursive(t *testing.T) {
	c, _ := startAgent(t, nil)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	events, _, _ := watchEvents(t, c, dir, false)
	os.WriteFile(filepath.Join(dir, "sub", "hidden"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "top"), nil, 0o644)
	if seen := drainUntil(t, events, sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "top"}); seen[sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "sub/hidden"}] {
		t.Fatal("a watch that is not recursive saw a subdirectory")
	}
}

func TestWatchEnds(t *testing.T) {
	c, _ := startAgent(t, nil)
	ctx := context.Background()
	dir := t.TempDir()
	nothing := func(sandbox.WatchEvent) error { return nil }
	if err := c.Watch(ctx, filepath.Join(dir, "missing"), true, nothing); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("watching a missing directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	if err := c.Watch(ctx, filepath.Join(dir, "file"), true, nothing); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("watching a file: %v", err)
	}
	// The watched directory removed ends the watch as not found.
	sub := filepath.Join(dir, "gone")
	os.Mkdir(sub, 0o755)
	_, done, _ := watchEvents(t, c, sub, true)
	os.Remove(sub)
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("a removed directory ended its watch with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch outlived its directory")
	}
}

// A client that stops reading loses its watch once sandbox.MaxWatchQueue events
// wait, rather than growing the agent's memory.
func TestWatchOverflow(t *testing.T) {
	c, _ := startAgent(t, nil)
	dir := t.TempDir()
	block := make(chan struct{})
	done, _ := startWatch(t, c, dir, false, func(sandbox.WatchEvent) { <-block }) // a client that never reads again
	f, err := os.Create(filepath.Join(dir, "hot"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Each write is an event; the socket's buffers hold some of them.
	for i := 0; i < 7000; i++ { // 14,000 events: past what the agent and the socket hold, short of the kernel's own limit (16,384)
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		f.Chmod(os.FileMode(0o600 | i%2*0o44)) // differs from the last event: not coalesced
	}
	close(block)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "events were lost") {
			t.Fatalf("an overflowing watch ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an overflowing watch never ended")
	}
}

// An entry made between a new directory's watch and its scan is reported
// once, by the scan; made again after a removal, it is news again.
func TestWatchScanReportsOnce(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"d/x", "d/y"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	rc, _ := f.SyscallConn()
	w := newWatcher(rc, dir, true)
	if err := w.add("", nil); err != nil {
		t.Fatal(err)
	}
	var got []sandbox.WatchEvent
	emit := func(ev sandbox.WatchEvent) error { got = append(got, ev); return nil }
	// The events inotify would queue for d made with x and y in it, x
	// after d's watch (so both its create and the scan report it), y
	// before; then y removed and made again.
	for _, ev := range []struct {
		dir  string
		mask uint32
		name string
	}{
		{"", unix.IN_CREATE | unix.IN_ISDIR, "d"},
		{"d", unix.IN_CREATE | unix.IN_ISDIR, "x"},
		{"d", unix.IN_DELETE | unix.IN_ISDIR, "y"},
		{"d", unix.IN_CREATE | unix.IN_ISDIR, "y"},
	} {
		if _, err := w.handle(w.wds[ev.dir], ev.mask, 0, ev.name, emit); err != nil {
			t.Fatal(err)
		}
	}
	want := []sandbox.WatchEvent{{Op: sandbox.WatchCreate, Name: "d"}, {Op: sandbox.WatchCreate, Name: "d/x"}, {Op: sandbox.WatchCreate, Name: "d/y"}, {Op: sandbox.WatchRemove, Name: "d/y"}, {Op: sandbox.WatchCreate, Name: "d/y"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}
