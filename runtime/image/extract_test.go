package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"smolvm.dev/smolvm/tests/testenv"
)

// FuzzExtract feeds arbitrary archives to the extractor: whatever it
// accepts or refuses, nothing may be written outside the layer directory.
func FuzzExtract(f *testing.F) {
	for _, es := range [][]entry{
		{dir("a/"), file("a/b", "x"), symlink("a/c", "/etc/passwd"), hardlink("a/d", "a/b")},
		{symlink("l", "/"), file("l/x", "y")},
		{symlink("up", "../.."), dir("up/x/")},
		{file("../escape", "x")},
		{dir("d/"), file("d/.wh..wh..opq", ""), file("d/.wh.x", ""), file("d/x", "back")},
		{hardlink("h", "../x")},
		{file("f", "1"), dir("f/"), file("f/g", "2")},
	} {
		f.Add(tarOf(f, es...))
	}
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		top, err := os.MkdirTemp(base, "")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(top)
		dir := filepath.Join(top, "a", "b", "layer")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
		extract(context.Background(), bytes.NewReader(data), dir, diffID, &budget{bytes: 1 << 20, entries: 1000})
		for _, d := range []string{top, filepath.Join(top, "a"), filepath.Join(top, "a", "b")} {
			des, err := os.ReadDir(d)
			if err != nil || len(des) != 1 {
				t.Fatalf("%s holds %v (%v) after extracting %q", d, des, err, data)
			}
		}
	})
}

func TestExtractReplacesEntries(t *testing.T) {
	testenv.NeedRoot(t)
	dir := t.TempDir()
	data := tarOf(t, file("x", "first"), file("x", "second"), file("d/.wh.y", ""), file("d/y", "restored"))
	sum := sha256.Sum256(data)
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if _, err := extract(context.Background(), bytes.NewReader(data), dir, diffID, &budget{bytes: 1 << 20, entries: 10}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "x")); got != "second" {
		t.Errorf("x = %q, want the later entry", got)
	}
	if got := readFile(t, filepath.Join(dir, "d/y")); got != "restored" {
		t.Errorf("d/y = %q, want the file that replaced its whiteout", got)
	}
}
