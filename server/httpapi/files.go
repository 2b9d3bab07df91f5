package httpapi

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/httpguard"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// Files move as tar streams between the server and the sandbox's agent,
// which extracts them inside the sandbox through os.Root: no archive entry
// or symlink can write outside the target directory, and the agent itself
// sees only the sandbox's filesystem, never the host's. The server adds:
// absolute, clean paths only, and uploads spooled whole (up to MaxUpload)
// before anything reaches the sandbox, so a rejected or broken upload
// leaves nothing half-written.

// CodeNoSuchFile is a 404 for a path inside a sandbox.
const CodeNoSuchFile = "no_such_file"

// sandboxPath checks the path query parameter.
func sandboxPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	switch {
	case p == "":
		return "", invalid("path", `query parameter "path": required`)
	case !strings.HasPrefix(p, "/"):
		return "", invalid("path", fmt.Sprintf(`query parameter "path": %q: must be absolute`, p))
	}
	if err := names.CheckPath(p); err != nil {
		return "", invalid("path", `query parameter "path": `+err.Error())
	}
	return path.Clean(p), nil
}

// fileError maps the agent's refusal of a file operation.
func fileError(err error) error {
	var oe *sandbox.OpError
	if !errors.As(err, &oe) {
		return err
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		e := errorFor(err)
		e.Code = CodeNoSuchFile
		return e
	}
	return invalid("path", err.Error())
}

// upload writes the body at path: the file itself, or with Content-Type
// application/x-tar an archive extracted there with cp semantics.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	dst, err := sandboxPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	// Refuse before reading the body when the sandbox cannot take it.
	sb, err := s.o.Manager.Get(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if sb.State != sandbox.StateRunning {
		writeError(w, fmt.Errorf("%s: %w: sandbox is %s", sb.Name, sandbox.ErrNotRunning, sb.State))
		return
	}
	// A declared length over the limit was refused before this handler.
	spool, err := os.CreateTemp(s.o.TempDir, "upload-*")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	n, err := io.Copy(spool, io.LimitReader(r.Body, s.o.MaxUpload+1))
	if err != nil {
		httpguard.RefuseBody(w, fmt.Errorf("reading the upload: %w", err), fail)
		return
	}
	if n > s.o.MaxUpload {
		httpguard.RefuseBody(w, &httpguard.TooLargeError{Limit: s.o.MaxUpload}, fail)
		return
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		writeError(w, err)
		return
	}
	// A file is written as sandbox.Service's WriteFile says, making its
	// parents (as the CLI and MCP do directly); an archive is extracted
	// with cp semantics, into a directory that must exist.
	if isTar(r.Header.Get("Content-Type")) {
		err = s.o.Manager.PutArchive(r.Context(), id, dst, spool)
	} else {
		err = s.o.Manager.WriteFile(r.Context(), id, dst, spool)
	}
	if err != nil {
		writeError(w, fileError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func isTar(contentType string) bool {
	return strings.HasPrefix(contentType, api.ContentTypeTar)
}

// download sends the file at path, or with ?format=tar (or Accept:
// application/x-tar) the path as a tar archive, which suits directories.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	src, err := sandboxPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" && isTar(r.Header.Get("Accept")) {
		format = "tar"
	}
	if format != "" && format != "tar" && format != "raw" {
		writeError(w, invalid("format", `query parameter "format": want "raw" or "tar"`))
		return
	}
	id := r.PathValue("id")
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := s.o.Manager.GetArchive(r.Context(), id, src, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	defer func() {
		pr.CloseWithError(errors.New("response ended"))
		<-errc
	}()
	if format == "tar" {
		s.sendTar(w, pr)
		return
	}
	tr := tar.NewReader(pr)
	hdr, err := tr.Next()
	if err != nil {
		// The agent's own error (no such file, not running) ended the pipe.
		writeError(w, fileError(unwrapPipe(err)))
		return
	}
	if hdr.Typeflag != tar.TypeReg {
		writeError(w, invalid("path", fmt.Sprintf("%s is not a regular file: download it with format=tar", src)))
		return
	}
	if hdr.Size > s.o.MaxDownload {
		writeError(w, &api.Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
			Message: fmt.Sprintf("%s has %d bytes, over the download limit of %d", src, hdr.Size, s.o.MaxDownload)})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(hdr.Size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, tr)
}

// sendTar streams an archive. Its size is unknown up front, so a stream
// past the limit is cut off mid-way, which the client sees as a broken
// response rather than a complete but truncated archive.
func (s *Server) sendTar(w http.ResponseWriter, pr *io.PipeReader) {
	var first [512]byte
	n, err := io.ReadFull(pr, first[:])
	if n == 0 && err != nil {
		writeError(w, fileError(unwrapPipe(err)))
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeTar)
	w.WriteHeader(http.StatusOK)
	w.Write(first[:n])
	written, _ := io.Copy(w, io.LimitReader(pr, s.o.MaxDownload-int64(n)+1))
	if int64(n)+written > s.o.MaxDownload {
		panic(http.ErrAbortHandler)
	}
}

// unwrapPipe recovers the error a pipe's writer closed it with.
func unwrapPipe(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("no data from the sandbox")
	}
	return err
}
