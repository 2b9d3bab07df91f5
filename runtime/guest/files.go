package guest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"smolvm.dev/smolvm/internal/archive"
	"smolvm.dev/smolvm/sandbox"
)

// put extracts the tar stream the client sends as stdin frames into path.
func (s *Server) put(c *conn, path string) sandbox.Exit {
	if path == "" {
		return sandbox.Exit{Code: 125, Error: "put: no path", Kind: sandbox.KindInvalid}
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			typ, b, err := c.read()
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			switch typ {
			case frameStdin:
				if _, err := pw.Write(b); err != nil {
					return
				}
			case frameStdinEOF:
				pw.Close()
				return
			case frameStdinAbort:
				pw.CloseWithError(errors.New("upload abandoned by the client"))
				return
			}
		}
	}()
	err := archive.ExtractTar(pr, path, 0)
	pr.CloseWithError(err)
	if err != nil {
		return fileExit(err)
	}
	return sandbox.Exit{}
}

// get streams path as a tar archive in stdout frames.
func (s *Server) get(c *conn, path string) sandbox.Exit {
	if path == "" {
		return sandbox.Exit{Code: 125, Error: "get: no path", Kind: sandbox.KindInvalid}
	}
	if _, err := os.Lstat(path); err != nil {
		return fileExit(err)
	}
	if err := archive.WriteTar(frameWriter{c, frameStdout}, path); err != nil {
		return fileExit(err)
	}
	return sandbox.Exit{}
}

func fileExit(err error) sandbox.Exit {
	kind := sandbox.KindIO
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kind = sandbox.KindNotFound
	case errors.Is(err, fs.ErrExist):
		kind = sandbox.KindExists
	case errors.Is(err, syscall.ENOTDIR):
		// A path that goes through a file, or a listing of one: the
		// caller's path is wrong (envd's ListDir answers it so).
		kind = sandbox.KindInvalid
	}
	return sandbox.Exit{Code: 1, Error: err.Error(), Kind: kind}
}
