package fakeruntime_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/fakeruntime"
	"smolvm.dev/smolvm/tests/testmgr"
)

// TestFSLikeTheAgent runs one script of file operations on the fake's FS
// and, in the full tier, on a real sandbox's (Manager.FS over the agent):
// both must answer alike, kinds of refusal included, so that the handler
// tests over the fake hold for the real runtime.
func TestFSLikeTheAgent(t *testing.T) {
	t.Run("fake", func(t *testing.T) { fsScript(t, fakeruntime.New(t)) })
	t.Run("real", func(t *testing.T) { fsScript(t, testmgr.New(t).Manager) })
}

func fsScript(t *testing.T, rt sandbox.Runtime) {
	ctx := t.Context()
	sb, err := rt.Create(ctx, sandbox.CreateOptions{Name: "fs", Start: true})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := rt.FS(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	kind := func(what string, err error, want string) {
		t.Helper()
		if got := sandbox.ErrorKind(err); got != want {
			t.Errorf("%s: %v (kind %q), want kind %q", what, err, got, want)
		}
	}
	const base = "/tmp/fs"
	_, err = fs.Stat(ctx, base)
	kind("stat of a missing path", err, sandbox.KindNotFound)

	fi, err := fs.WriteFile(ctx, base+"/a/b.txt", strings.NewReader("hi"))
	if err != nil || fi.Type != "file" || fi.Size != 2 || fi.Path != base+"/a/b.txt" || fi.Name != "b.txt" {
		t.Fatalf("write: %+v %v", fi, err)
	}
	if fi, err := fs.Stat(ctx, base+"/a"); err != nil || fi.Type != "dir" {
		t.Errorf("the parent a write made: %+v %v", fi, err)
	}
	_, err = fs.Mkdir(ctx, base+"/a")
	kind("mkdir of an existing dir", err, sandbox.KindExists)
	_, err = fs.List(ctx, base+"/a/b.txt", 1)
	kind("list of a file", err, sandbox.KindInvalid)
	var buf bytes.Buffer
	kind("read of a dir", fs.ReadFile(ctx, base+"/a", &buf), sandbox.KindIO)
	kind("remove of a missing path", fs.Remove(ctx, base+"/nothing"), sandbox.KindNotFound)
	_, err = fs.Rename(ctx, base+"/a/b.txt", base+"/no/such/dir/c.txt")
	kind("rename into a missing dir", err, sandbox.KindNotFound)

	for depth, want := range map[int][]string{1: {base + "/a"}, 2: {base + "/a", base + "/a/b.txt"}} {
		fis, err := fs.List(ctx, base, depth)
		var got []string
		for _, fi := range fis {
			got = append(got, fi.Path)
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("list at depth %d: %q %v, want %q", depth, got, err, want)
		}
	}
	if fi, err := fs.Rename(ctx, base+"/a/b.txt", base+"/c.txt"); err != nil || fi.Path != base+"/c.txt" || fi.Size != 2 {
		t.Errorf("rename: %+v %v", fi, err)
	}
	if err := fs.ReadFile(ctx, base+"/c.txt", &buf); err != nil || buf.String() != "hi" {
		t.Errorf("read after the rename: %q %v", buf.String(), err)
	}

	// A watch says it is in place, then sees a new file.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	events := make(chan sandbox.WatchEvent, 16)
	done := make(chan error, 1)
	go func() {
		done <- fs.Watch(wctx, base, false, func(ev sandbox.WatchEvent) error { events <- ev; return nil })
	}()
	if ev := <-events; ev != (sandbox.WatchEvent{}) {
		t.Fatalf("first event %+v, want the empty one", ev)
	}
	if _, err := fs.WriteFile(ctx, base+"/new", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		select {
		case ev := <-events:
			seen = ev == sandbox.WatchEvent{Op: sandbox.WatchCreate, Name: "new"}
		case err := <-done:
			t.Fatalf("the watch ended before it saw the new file: %v", err)
		}
	}
	cancel()
	<-done
	err = fs.Watch(ctx, base+"/c.txt", false, func(sandbox.WatchEvent) error { return nil })
	kind("watch of a file", err, sandbox.KindInvalid)

	if err := fs.Remove(ctx, base); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Stat(ctx, base+"/c.txt")
	kind("stat after the remove", err, sandbox.KindNotFound)
}
