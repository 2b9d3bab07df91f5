package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/internal/archive"
	"smolvm.dev/smolvm/sandbox"
)

// WriteFile writes r as the file at path inside the sandbox. The server
// takes the whole body before writing anything, so a failed upload leaves
// nothing behind.
func (c *Client) WriteFile(ctx context.Context, ref, path string, r io.Reader) error {
	return c.put(ctx, ref, path, r, "application/octet-stream")
}

// ReadFile returns the regular file at path inside the sandbox; the
// caller closes it.
func (c *Client) ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: sbPath(ref, "/files"), query: url.Values{"path": {path}}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (c *Client) put(ctx context.Context, ref, path string, r io.Reader, contentType string) error {
	resp, err := c.do(ctx, request{method: http.MethodPut, path: sbPath(ref, "/files"), query: url.Values{"path": {path}},
		body: r, contentType: contentType})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// CopyIn copies the host path src (a file or a tree) to dst inside the
// sandbox, with cp semantics, as manager.Manager.CopyIn does.
func (c *Client) CopyIn(ctx context.Context, ref, src, dst string) error {
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.WriteTar(pw, src)) }()
	err := c.PutArchive(ctx, ref, dst, pr)
	pr.CloseWithError(err)
	return err
}

// PutArchive extracts the tar stream r at dst inside sandbox ref, with
// cp semantics (sandbox.Archives).
func (c *Client) PutArchive(ctx context.Context, ref, dst string, r io.Reader) error {
	return c.put(ctx, ref, dst, r, api.ContentTypeTar)
}

// GetArchive writes src from inside sandbox ref to w as a tar stream
// (sandbox.Archives).
func (c *Client) GetArchive(ctx context.Context, ref, src string, w io.Writer) error {
	rc, err := c.getArchive(ctx, ref, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("cp from %s:%s: %w", ref, src, err)
	}
	return nil
}

// getArchive opens src inside sandbox ref as a tar stream.
func (c *Client) getArchive(ctx context.Context, ref, src string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: sbPath(ref, "/files"),
		query: url.Values{"path": {src}, "format": {"tar"}}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// CopyOut copies src inside the sandbox to the host path dst, never
// writing outside dst and at most sandbox.MaxCopyOut bytes.
func (c *Client) CopyOut(ctx context.Context, ref, src, dst string) error {
	rc, err := c.getArchive(ctx, ref, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := archive.ExtractTar(rc, dst, sandbox.MaxCopyOut); err != nil {
		if errors.Is(err, archive.ErrTooLarge) {
			return fmt.Errorf("cp from %s:%s: %w: %w", ref, src, ErrTooLarge, err)
		}
		return fmt.Errorf("cp from %s:%s: %w", ref, src, err)
	}
	return nil
}
