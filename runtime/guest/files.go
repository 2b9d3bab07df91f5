package guest

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// put extracts the tar stream the client sends as stdin frames into path.
func (s *Server) put(c *conn, path string) Exit {
	if path == "" {
		return Exit{Code: 125, Error: "put: no path", Kind: KindInvalid}
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
	err := ExtractTar(pr, path, 0)
	pr.CloseWithError(err)
	if err != nil {
		return fileExit(err)
	}
	return Exit{}
}

// get streams path as a tar archive in stdout frames.
func (s *Server) get(c *conn, path string) Exit {
	if path == "" {
		return Exit{Code: 125, Error: "get: no path", Kind: KindInvalid}
	}
	if _, err := os.Lstat(path); err != nil {
		return fileExit(err)
	}
	if err := WriteTar(frameWriter{c, frameStdout}, path); err != nil {
		return fileExit(err)
	}
	return Exit{}
}

func fileExit(err error) Exit {
	kind := KindIO
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kind = KindNotFound
	case errors.Is(err, fs.ErrExist):
		kind = KindExists
	}
	return Exit{Code: 1, Error: err.Error(), Kind: kind}
}
