package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"smolvm.dev/smolvm/sandbox"
)

func TestFileOps(t *testing.T) {
	c, _ := startAgent(t, nil)
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "f.txt")

	fi, err := c.WriteFile(ctx, p, strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != p || fi.Type != "file" || fi.Size != 5 || fi.Perm != "-rw-r--r--" {
		t.Fatalf("write: %+v", fi)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, p, &got); err != nil || got.String() != "hello" {
		t.Fatalf("read: %q %v", got.String(), err)
	}
	if err := c.ReadFile(ctx, dir, &got); err == nil {
		t.Fatal("reading a directory succeeded")
	}

	// A failed upload leaves the old content and no temporary file.
	broken := io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(errors.New("client gone")))
	if _, err := c.WriteFile(ctx, p, broken); err == nil || !strings.Contains(err.Error(), "client gone") {
		t.Fatalf("a broken upload: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "hello" {
		t.Fatalf("after a broken upload the file holds %q", b)
	}
	// The agent has removed its temporary file by the time it answers.
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}

	if _, err := c.Mkdir(ctx, filepath.Join(dir, "a")); sandbox.ErrorKind(err) != sandbox.KindExists {
		t.Fatalf("mkdir of an existing dir: %v (kind %q)", err, sandbox.ErrorKind(err))
	}
	if fi, err := c.Mkdir(ctx, filepath.Join(dir, "n", "m")); err != nil || fi.Type != "dir" {
		t.Fatalf("mkdir: %+v %v", fi, err)
	}
	os.Symlink("a/b/f.txt", filepath.Join(dir, "link"))

	list, err := c.List(ctx, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name+":"+e.Type+":"+e.Target)
	}
	if strings.Join(names, " ") != "a:dir: link:symlink:a/b/f.txt n:dir:" {
		t.Fatalf("list depth 1: %v", names)
	}
	deep, err := c.List(ctx, dir, 3)
	if err != nil || len(deep) != 6 {
		t.Fatalf("list depth 3: %d entries, %v", len(deep), err)
	}
	if _, err := c.List(ctx, p, 1); err == nil {
		t.Fatal("listing a file succeeded")
	}

	moved, err := c.Rename(ctx, p, filepath.Join(dir, "g.txt"))
	if err != nil || moved.Name != "g.txt" || moved.Size != 5 {
		t.Fatalf("rename: %+v %v", moved, err)
	}
	if _, err := c.Stat(ctx, p); sandbox.ErrorKind(err) != sandbox.KindNotFound {
		t.Fatalf("stat of the old name: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "a")); sandbox.ErrorKind(err) != sandbox.KindNotFound {
		t.Fatalf("removing twice: %v", err)
	}
}
