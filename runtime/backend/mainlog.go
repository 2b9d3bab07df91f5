package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The agent keeps the main process's exit and output in its run dir,
// which the host shares (a bind mount under gVisor, 9p under a VM): the
// host reads them without the agent, also after the sandbox has stopped.

// ReadExit reads the agent's exit file; nil if there is none yet.
func ReadExit(path string) (*Exit, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	e := &Exit{At: fi.ModTime()}
	if err := json.NewDecoder(f).Decode(&e.Exit); err != nil {
		return nil, err
	}
	return e, nil
}

// MainLogReader reads the agent's main log, which it rotates once (to
// log+".1"): that file, then log. Following, it waits for more until
// alive says the sandbox stopped, or ctx ends.
func MainLogReader(ctx context.Context, log string, follow bool, alive func() (bool, error)) io.ReadCloser {
	return &logReader{ctx: ctx, files: []string{log + ".1", log}, follow: follow, alive: alive}
}

// logPoll is how often a follower looks for more output.
const logPoll = 50 * time.Millisecond

// logReader reads files one after the other. Following, it waits at the
// end of the last one (or for it to appear, before the sandbox starts)
// until the sandbox stops, and then reads what was written before it did.
type logReader struct {
	ctx     context.Context
	files   []string // not opened yet, oldest first
	f       *os.File
	follow  bool
	alive   func() (bool, error)
	stopped bool // seen stopped: one more read to the end, then io.EOF
}

func (r *logReader) Read(p []byte) (int, error) {
	for {
		if r.f == nil {
			if len(r.files) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(r.files[0])
			last := len(r.files) == 1
			switch {
			case err == nil:
				r.f, r.files = f, r.files[1:]
			case !errors.Is(err, fs.ErrNotExist):
				return 0, err
			case !last || !r.follow:
				r.files = r.files[1:]
			default:
				// Not started yet.
				if err := r.wait(); err != nil {
					return 0, err
				}
			}
			continue
		}
		n, err := r.f.Read(p)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		if len(r.files) > 0 || !r.follow {
			r.f.Close()
			r.f = nil
			continue
		}
		if err := r.wait(); err != nil {
			return 0, err
		}
	}
}

// wait returns once more output may have come, or io.EOF when none will.
func (r *logReader) wait() error {
	if r.stopped {
		return io.EOF
	}
	alive, err := r.alive()
	if err != nil {
		return err
	}
	if !alive {
		r.stopped = true
		return nil
	}
	select {
	case <-r.ctx.Done():
		return io.EOF
	case <-time.After(logPoll):
		return nil
	}
}

func (r *logReader) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// CopyFiles copies the named files that exist in src into dst: the main
// log a checkpoint keeps and a restored copy continues.
func CopyFiles(src, dst string, names []string) error {
	for _, n := range names {
		in, err := os.Open(filepath.Join(src, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		out, err := os.OpenFile(filepath.Join(dst, n), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			in.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("copy %s: %w", n, err)
		}
	}
	return nil
}
