package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
)

// The agent keeps the main process's exit and output in the run dir,
// which is shared with the host: the host reads them without the agent,
// also after the sandbox has stopped.

// MainExit implements backend.Backend, reading the agent's exit file.
func (b *Backend) MainExit(ctx context.Context, s *backend.Spec) (*backend.Exit, error) {
	f, err := os.Open(layout{s.Dir}.ExitFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("exit of %s: %w", s.ID, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("exit of %s: %w", s.ID, err)
	}
	e := &backend.Exit{At: fi.ModTime()}
	if err := json.NewDecoder(f).Decode(&e.Exit); err != nil {
		return nil, fmt.Errorf("exit of %s: %w", s.ID, err)
	}
	return e, nil
}

// MainLog implements backend.Backend. The agent rotates the log once, to
// main.log.1, so the output is that file and then main.log.
func (b *Backend) MainLog(ctx context.Context, s *backend.Spec, follow bool) (io.ReadCloser, error) {
	cur := layout{s.Dir}.LogFile()
	return &logReader{ctx: ctx, files: []string{cur + ".1", cur}, follow: follow, alive: func() (bool, error) {
		st, err := b.State(ctx, s)
		return st == backend.StatusRunning || st == backend.StatusPaused || st == backend.StatusCreated, err
	}}, nil
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
