package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/sandbox"
)

// A snapshot travels between data dirs (a cluster's nodes) as a tar
// stream: recordName, the snapshot's record as JSON, then each of its
// files under filesDir, in the record's order.
const (
	recordName = "snapshot.json"
	filesDir   = "files/"
	maxRecord  = 16 << 20
)

// ErrNotSealed is a snapshot whose content is not hashed yet, so it
// cannot be sent: its receiver could not check what it got.
var ErrNotSealed = sandbox.ErrSnapshotNotSealed

// Export writes snap, which must be durable, as a tar stream to w. A file
// that no longer matches its record fails the export as corrupt.
func (s *Store) Export(ctx context.Context, snap *sandbox.Snapshot, w io.Writer) error {
	if !snap.Durable || snap.Digest == "" {
		return fmt.Errorf("export %s: %w: retry once it is durable", shortID(snap.ID), ErrNotSealed)
	}
	dir, err := s.path(snap.ID)
	if err != nil {
		return err
	}
	// Names and the owner are this store's; the receiver gives its own.
	rec := *snap
	rec.Name, rec.Names, rec.Tenant = "", nil, ""
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: recordName, Mode: 0o600, Size: int64(len(b))}); err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	for _, f := range snap.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := exportFile(tw, filepath.Join(dir, filepath.FromSlash(f.Name)), f); err != nil {
			return fmt.Errorf("export %s: %w", shortID(snap.ID), err)
		}
	}
	return tw.Close()
}

func exportFile(tw *tar.Writer, p string, f sandbox.File) error {
	fh, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, f.Name, err)
	}
	defer fh.Close()
	if err := tw.WriteHeader(&tar.Header{Name: filesDir + f.Name, Mode: 0o600, Size: f.Size}); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(fh, f.Size))
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("%w: %s is %d bytes, its record says %d", ErrCorrupt, f.Name, n, f.Size)
	}
	return nil
}

// Import reads a stream Export wrote and stores the snapshot under its
// own ID, named name ("" for none), owned by ctx's tenant. Each file is checked against the
// record's SHA-256 as it arrives, and the listing against the record's
// digest, so a damaged or altered stream is ErrCorrupt and leaves
// nothing behind. Snapshots are content-addressed: one already here with
// that ID and digest is returned as it is, and nothing is read past the
// record.
func (s *Store) Import(ctx context.Context, r io.Reader, name string) (snap *sandbox.Snapshot, copied bool, err error) {
	if name != "" {
		if err := checkName(name); err != nil {
			return nil, false, err
		}
	}
	tr := tar.NewReader(r)
	rec, err := readRecord(tr)
	if err != nil {
		return nil, false, fmt.Errorf("import snapshot: %w", err)
	}
	if have, err := s.load(ctx, rec.ID); err == nil {
		if have.Digest != rec.Digest {
			return nil, false, fmt.Errorf("import snapshot %s: %w: the snapshot here has digest %s, the stream %s", shortID(rec.ID), ErrCorrupt, have.Digest, rec.Digest)
		}
		return have, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	g, err := s.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := receive(ctx, tr, rec.Files, g.Dir()); err != nil {
		g.Abort()
		return nil, false, fmt.Errorf("import snapshot %s: %w", shortID(rec.ID), err)
	}
	var meta any
	if len(rec.Meta) > 0 {
		meta = rec.Meta
	}
	snap, err = g.commitAs(ctx, rec.ID, name, rec.ImageID, rec.Lineage, meta)
	if err != nil {
		return nil, false, fmt.Errorf("import snapshot %s: %w", shortID(rec.ID), err)
	}
	return snap, true, nil
}

// readRecord reads and checks the stream's record: an ID, safe file
// names in byte order, and a digest that is its listing's.
func readRecord(tr *tar.Reader) (*sandbox.Snapshot, error) {
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("%w: no record: %w", ErrCorrupt, err)
	}
	if h.Name != recordName || h.Size > maxRecord {
		return nil, fmt.Errorf("%w: the stream starts with %q (%d bytes), not its record", ErrCorrupt, h.Name, h.Size)
	}
	var rec sandbox.Snapshot
	if err := json.NewDecoder(io.LimitReader(tr, maxRecord)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("%w: record: %w", ErrCorrupt, err)
	}
	if !hexDir().MatchString(rec.ID) {
		return nil, fmt.Errorf("%w: record: ID %q is not 64 hex digits", ErrCorrupt, rec.ID)
	}
	if len(rec.Files) == 0 {
		return nil, fmt.Errorf("%w: record: no files", ErrCorrupt)
	}
	for i, f := range rec.Files {
		clean := path.Clean(f.Name)
		if clean != f.Name || path.IsAbs(f.Name) || clean == "." || strings.HasPrefix(clean, "../") || strings.ContainsAny(f.Name, "\n\x00") {
			return nil, fmt.Errorf("%w: record: file name %q", ErrCorrupt, f.Name)
		}
		if i > 0 && rec.Files[i-1].Name >= f.Name {
			return nil, fmt.Errorf("%w: record: files not in byte order at %q", ErrCorrupt, f.Name)
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("%w: record: %s has size %d", ErrCorrupt, f.Name, f.Size)
		}
	}
	if digest(rec.Files) != rec.Digest {
		return nil, fmt.Errorf("%w: record: its files' listing is not digest %s", ErrCorrupt, rec.Digest)
	}
	return &rec, nil
}

// receive writes the stream's files into dir, each checked against want.
func receive(ctx context.Context, tr *tar.Reader, want []sandbox.File, dir string) error {
	for _, f := range want {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%w: the stream ends before %s: %w", ErrCorrupt, f.Name, err)
		}
		if h.Name != filesDir+f.Name || h.Size != f.Size || h.Typeflag != tar.TypeReg {
			return fmt.Errorf("%w: the stream has %q (%d bytes) where %s (%d bytes) was due", ErrCorrupt, h.Name, h.Size, f.Name, f.Size)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		sum, crc := sha256.New(), crc32.New(crcTable)
		_, err = io.Copy(io.MultiWriter(out, sum, crc), streamReader{tr})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		var se streamError
		if errors.As(err, &se) {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, f.Name, se.error)
		}
		if err != nil {
			// A full disk is the receiver's to report as it is.
			return fmt.Errorf("write %s: %w", f.Name, err)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != f.SHA256 || crc.Sum32() != f.CRC32C {
			return fmt.Errorf("%w: %s has SHA-256 %s, its record says %s", ErrCorrupt, f.Name, got, f.SHA256)
		}
	}
	if h, err := tr.Next(); err != io.EOF {
		name := ""
		if h != nil {
			name = h.Name
		}
		return fmt.Errorf("%w: the stream goes on past the record's files (%q, %v)", ErrCorrupt, name, err)
	}
	return nil
}

// streamReader tells the stream's read errors (it ended early) from the
// disk's write errors.
type streamReader struct{ r io.Reader }

type streamError struct{ error }

func (s streamReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = streamError{err}
	}
	return n, err
}
