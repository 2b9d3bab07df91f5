package snapshot

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// TestTransfer exports a sealed snapshot from one store and imports it
// into another: same ID, digest and files; a second import reads only
// the record; a stream damaged in any way is ErrCorrupt and leaves
// nothing behind.
func TestTransfer(t *testing.T) {
	src := openStore(t, t.TempDir())
	snap := commit(t, src, "dev", map[string]string{"pages.img": strings.Repeat("p", 100000), "state/checkpoint.img": "state", "a.b": "x"})
	var stream bytes.Buffer
	if err := src.Export(t.Context(), snap, &stream); err != nil {
		t.Fatal(err)
	}

	dstDir := t.TempDir()
	dst := openStore(t, dstDir)
	_, copied, err := dst.Import(t.Context(), bytes.NewReader(stream.Bytes()), "copy")
	if err != nil || !copied {
		t.Fatalf("import: %v (copied %t)", err, copied)
	}
	dst.Wait()
	got, err := dst.Get(t.Context(), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != snap.ID || got.Digest != snap.Digest || !got.Durable || got.ImageID != snap.ImageID || got.Lineage != snap.Lineage || got.Name != "copy" {
		t.Fatalf("imported %+v, exported %+v", got, snap)
	}
	if _, err := dst.Verify(t.Context(), got); err != nil {
		t.Fatalf("verify the import: %v", err)
	}
	// Content-addressed: the second import stops after the record.
	head := stream.Bytes()[:1024+512]
	if _, copied, err := dst.Import(t.Context(), io.MultiReader(bytes.NewReader(head), failing{}), ""); err != nil || copied {
		t.Fatalf("second import: %v (copied %t)", err, copied)
	}

	// A snapshot not sealed yet cannot be sent.
	unsealed := *snap
	unsealed.Durable, unsealed.Digest = false, ""
	if err := src.Export(t.Context(), &unsealed, io.Discard); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("export of an unsealed snapshot: %v", err)
	}

	record := func(edit func(*sandbox.Snapshot)) []byte {
		var rec sandbox.Snapshot
		tr := tar.NewReader(bytes.NewReader(stream.Bytes()))
		tr.Next()
		json.NewDecoder(tr).Decode(&rec)
		edit(&rec)
		b, _ := json.Marshal(rec)
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		tw.WriteHeader(&tar.Header{Name: recordName, Mode: 0o600, Size: int64(len(b))})
		tw.Write(b)
		// The files as they were.
		tr2 := tar.NewReader(bytes.NewReader(stream.Bytes()))
		tr2.Next()
		for {
			h, err := tr2.Next()
			if err != nil {
				break
			}
			tw.WriteHeader(h)
			io.Copy(tw, tr2)
		}
		tw.Close()
		return out.Bytes()
	}
	flipped := bytes.Clone(stream.Bytes())
	i := bytes.Index(flipped, []byte("ppppp"))
	flipped[i] = 'q'
	for name, bad := range map[string][]byte{
		"a flipped byte":      flipped,
		"cut short":           stream.Bytes()[:stream.Len()/2],
		"not a tar":           []byte("hello"),
		"a record digest":     record(func(r *sandbox.Snapshot) { r.Digest = "sha256:" + strings.Repeat("0", 64) }),
		"a file's size":       record(func(r *sandbox.Snapshot) { r.Files[0].Size++; r.Digest = digest(r.Files) }),
		"a name out of store": record(func(r *sandbox.Snapshot) { r.Files[0].Name = "../../etc/x"; r.Digest = digest(r.Files) }),
		"a bad ID":            record(func(r *sandbox.Snapshot) { r.ID = "../x" }),
	} {
		fresh := openStore(t, t.TempDir())
		if _, _, err := fresh.Import(t.Context(), bytes.NewReader(bad), ""); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
		if snaps, err := fresh.List(t.Context()); err != nil || len(snaps) != 0 {
			t.Errorf("%s: %d snapshots left (%v)", name, len(snaps), err)
		}
		fresh.Wait()
		entries, _ := os.ReadDir(fresh.dir)
		for _, e := range entries {
			if e.Name() != lockName {
				t.Errorf("%s: %s left in the store", name, e.Name())
			}
		}
	}
}

// failing is a reader that fails: what Import must not read.
type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("read past the record") }
