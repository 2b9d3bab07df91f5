package manager

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"smolvm.dev/smolvm/internal/archive"
	"smolvm.dev/smolvm/runtime/guest"
	"smolvm.dev/smolvm/sandbox"
)

// CopyIn copies the host path src to dst inside the sandbox.
func (m *Manager) CopyIn(ctx context.Context, ref, src, dst string) error {
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.WriteTar(pw, src)) }()
	err := m.PutArchive(ctx, ref, dst, pr)
	pr.CloseWithError(err)
	return err
}

// PutArchive extracts the tar stream r (as archive.WriteTar writes it) at
// dst inside the sandbox, with cp semantics. The agent extracts through
// os.Root, so no entry or symlink can write outside dst's directory, and
// the sandbox's own view of the filesystem bounds everything else.
func (m *Manager) PutArchive(ctx context.Context, ref, dst string, r io.Reader) error {
	rec, err := m.running(ctx, ref)
	if err != nil {
		return err
	}
	if err := m.withGuest(ctx, rec, func() error { return rec.be.Guest(&rec.spec).Put(ctx, dst, r) }); err != nil {
		return fmt.Errorf("cp to %s:%s: %w", rec.Name, dst, err)
	}
	return nil
}

// CopyOut copies src inside the sandbox to the host path dst.
func (m *Manager) CopyOut(ctx context.Context, ref, src, dst string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := archive.ExtractTar(pr, dst, sandbox.MaxCopyOut)
		pr.CloseWithError(err)
		// Drain so the agent side finishes even when extraction failed.
		io.Copy(io.Discard, pr)
		errc <- err
	}()
	gerr := m.GetArchive(ctx, ref, src, pw)
	pw.CloseWithError(gerr)
	xerr := <-errc
	// A failed get also fails the extraction with the same error; an
	// extraction that failed first (too large) fails the get instead.
	if xerr != nil && (gerr == nil || !errors.Is(xerr, gerr)) {
		return fmt.Errorf("cp from %s:%s: %w", ref, src, xerr)
	}
	return gerr
}

// GetArchive writes src from inside the sandbox to w as a tar stream.
func (m *Manager) GetArchive(ctx context.Context, ref, src string, w io.Writer) error {
	rec, err := m.running(ctx, ref)
	if err != nil {
		return err
	}
	if err := m.withGuest(ctx, rec, func() error { return rec.be.Guest(&rec.spec).Get(ctx, src, w) }); err != nil {
		return fmt.Errorf("cp from %s:%s: %w", rec.Name, src, err)
	}
	return nil
}

// Stats returns live resource usage.
func (m *Manager) Stats(ctx context.Context, ref string) (*sandbox.Stats, error) {
	r, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return r.be.Stats(ctx, &r.spec)
}

// Logs writes the main process's output. With Follow it keeps going until
// the sandbox stops or ctx ends.
func (m *Manager) Logs(ctx context.Context, ref string, o sandbox.LogOptions) error {
	r, err := m.get(ctx, ref)
	if err != nil {
		return err
	}
	log, err := r.be.MainLog(ctx, &r.spec, o.Follow)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", r.Name, err)
	}
	defer log.Close()
	br := bufio.NewReader(log)
	for {
		// A last line without its newline is still being written.
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("logs of %s: %w", r.Name, err)
		}
		var e guest.LogEntry
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		w := o.Stdout
		if e.Stream == "stderr" {
			w = o.Stderr
		}
		if w != nil {
			if _, err := w.Write(e.Bytes()); err != nil {
				return err
			}
		}
	}
}

// FS returns a running sandbox's file system, for API layers that expose
// files piecemeal (stat, list, rename, watch). The agent's client is one,
// and the interface hides its other operations: commands go through Exec,
// which applies the sandbox's policy.
func (m *Manager) FS(ctx context.Context, ref string) (sandbox.FS, error) {
	r, err := m.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	return r.be.Guest(&r.spec), nil
}

// ReadFile streams the regular file at path out of a running sandbox.
func (m *Manager) ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	rec, err := m.running(ctx, ref)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		err := m.withGuest(ctx, rec, func() error { return rec.be.Guest(&rec.spec).ReadFile(ctx, path, pw) })
		if err != nil {
			err = fmt.Errorf("read %s:%s: %w", rec.Name, path, err)
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// WriteFile creates or replaces the file at path inside a running sandbox.
func (m *Manager) WriteFile(ctx context.Context, ref, path string, r io.Reader) error {
	rec, err := m.running(ctx, ref)
	if err != nil {
		return err
	}
	err = m.withGuest(ctx, rec, func() error {
		_, err := rec.be.Guest(&rec.spec).WriteFile(ctx, path, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s:%s: %w", rec.Name, path, err)
	}
	return nil
}
