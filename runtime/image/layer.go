package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/internal/flock"
)

// tempPrefix starts the names of directories being built or deleted. The
// process ID lets a later Open remove what a crashed process left.
const tempPrefix = ".tmp-"

func (s *Store) layerDir(diffID string) string {
	return filepath.Join(s.layers, "sha256", strings.TrimPrefix(diffID, "sha256:"))
}

// lock takes the store-wide lock that orders registering images against
// deleting layers, so a removal never deletes a layer an import is about to
// reference. flock is per open file, so it also excludes other goroutines.
func (s *Store) lock() (unlock func(), err error) {
	unlock, err = flock.Lock(filepath.Join(s.layers, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("lock layers: %w", err)
	}
	return unlock, nil
}

// budget is what an image may still unpack to.
type budget struct {
	bytes   int64
	entries int
}

// layerSource is one layer of an image being stored.
type layerSource struct {
	layer  v1.Layer
	diffID v1.Hash
	// remote layers are read compressed, so progress counts the bytes
	// transferred; local ones are read uncompressed, which spares
	// recompressing the uncompressed layers of docker-save tarballs.
	remote bool
}

// ensureLayer makes sure src is extracted in the layer store. It reports
// the layer's unpacked size and whether this call extracted it.
func (s *Store) ensureLayer(ctx context.Context, src layerSource, progress func(Progress), b *budget) (size int64, made bool, err error) {
	id := src.diffID.String()
	report := func(p Progress) {
		if progress != nil {
			p.Layer = id
			progress(p)
		}
	}
	dir := s.layerDir(id)
	if _, err := os.Lstat(dir); err == nil {
		size, err := s.layerSize(ctx, id)
		if err != nil {
			return 0, false, err
		}
		report(Progress{Done: size, Total: size, Status: "exists"})
		return size, false, nil
	}

	tmp, err := os.MkdirTemp(filepath.Dir(dir), tempName())
	if err != nil {
		return 0, false, fmt.Errorf("layer %s: %w", id, err)
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 0, false, fmt.Errorf("layer %s: %w", id, err)
	}

	r, pr, err := openLayer(src, report)
	if err != nil {
		return 0, false, fmt.Errorf("layer %s: %w", id, err)
	}
	size, err = extract(ctx, r, tmp, src.diffID, b)
	if err != nil {
		r.Close()
		return 0, false, err
	}
	if err := r.finish(); err != nil {
		return 0, false, fmt.Errorf("layer %s: %w", id, err)
	}
	pr.flush()

	if err := os.Rename(tmp, dir); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			// Another process extracted the same layer meanwhile: use its copy.
			report(Progress{Done: size, Total: size, Status: "done"})
			return size, false, nil
		}
		return 0, false, fmt.Errorf("layer %s: %w", id, err)
	}
	tmp = ""
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return 0, true, fmt.Errorf("layer %s: %w", id, err)
	}
	report(Progress{Done: size, Total: size, Status: "done"})
	return size, true, nil
}

// openLayer returns the uncompressed tar stream of src and the reader
// that reports its progress.
func openLayer(src layerSource, report func(Progress)) (*layerReader, *progressReader, error) {
	if !src.remote {
		rc, err := src.layer.Uncompressed()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		pr := &progressReader{r: rc, p: Progress{Status: "extracting"}, report: report}
		return &layerReader{Reader: pr, compressed: rc}, pr, nil
	}
	total, err := src.layer.Size()
	if err != nil {
		return nil, nil, err
	}
	rc, err := src.layer.Compressed()
	if err != nil {
		return nil, nil, err
	}
	pr := &progressReader{r: rc, p: Progress{Total: total, Status: "downloading"}, report: report}
	lr := &layerReader{compressed: rc}
	if lr.Reader, lr.closeDec, err = decompress(pr); err != nil {
		rc.Close()
		return nil, nil, err
	}
	return lr, pr, nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress detects gzip or zstd compression of a layer; anything else is
// taken as a plain tar.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
		}
		return zr, func() {}, nil
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// layerReader reads an uncompressed layer.
type layerReader struct {
	io.Reader
	compressed io.ReadCloser
	closeDec   func()
}

func (l *layerReader) Close() error {
	if l.closeDec != nil {
		l.closeDec()
	}
	return l.compressed.Close()
}

// finish reads the rest of the underlying stream, whose digest the registry
// client checks only at its end, and closes it.
func (l *layerReader) finish() error {
	_, err := io.Copy(io.Discard, l.compressed)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

// progressReader counts bytes read and reports them at most every 100ms.
type progressReader struct {
	r      io.Reader
	p      Progress
	report func(Progress)
	last   time.Time
}

func (pr *progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.Done += int64(n)
	if now := time.Now(); now.Sub(pr.last) >= 100*time.Millisecond {
		pr.last = now
		pr.report(pr.p)
	}
	return n, err
}

func (pr *progressReader) flush() { pr.report(pr.p) }

// layerSize returns the unpacked size of a present layer: recorded with
// the images using it, or measured when none is registered yet.
func (s *Store) layerSize(ctx context.Context, diffID string) (int64, error) {
	var size int64
	err := s.st.DB().QueryRowContext(ctx, `SELECT size FROM image_layers WHERE diff_id = ? LIMIT 1`, diffID).Scan(&size)
	if err == nil {
		return size, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("layer %s size: %w", diffID, err)
	}
	err = filepath.WalkDir(s.layerDir(diffID), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("layer %s size: %w", diffID, err)
	}
	return size, nil
}

// deleteLayer removes a layer directory, first renaming it out of the way
// so that no half-deleted layer is ever found under its name.
func (s *Store) deleteLayer(diffID string) error {
	dir := s.layerDir(diffID)
	tmp := filepath.Join(filepath.Dir(dir), tempName()+"rm-"+filepath.Base(dir))
	if err := os.Rename(dir, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete layer %s: %w", diffID, err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("delete layer %s: %w", diffID, err)
	}
	return nil
}

// tempName is the prefix of a temporary directory owned by this process.
func tempName() string {
	return fmt.Sprintf("%s%d-", tempPrefix, os.Getpid())
}

// removeStaleTemps deletes the temporary directories in dir left by
// processes that no longer exist. It is best effort: a leftover only costs
// disk space until the next try.
func removeStaleTemps(dir string) {
	for _, p := range StaleTemps(dir) {
		os.RemoveAll(p)
	}
}

// TempName is the prefix of a temporary directory this process owns, for
// os.MkdirTemp: once the process is gone, StaleTemps finds it.
func TempName() string { return tempName() }

// StaleTemps lists the temporary directories in dir (named by TempName)
// of processes that no longer exist.
func StaleTemps(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
