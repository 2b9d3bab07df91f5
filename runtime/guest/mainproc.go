package guest

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"smolvm.dev/smolvm/sandbox"
)

// LogEntry is one line of a sandbox's main-process log, stored as JSON
// lines so the host can read it without the agent.
type LogEntry struct {
	Time   time.Time `json:"t"`
	Stream string    `json:"s"`           // "stdout" or "stderr"
	Data   string    `json:"d,omitempty"` // the bytes, when valid UTF-8
	Binary []byte    `json:"b,omitempty"` // the bytes otherwise
}

// Bytes returns the entry's payload.
func (e LogEntry) Bytes() []byte {
	if e.Binary != nil {
		return e.Binary
	}
	return []byte(e.Data)
}

const defaultLogLimit = 64 << 20

// logWriter appends entries to the log file, rotating it once to
// "<name>.1" when it passes its limit so a chatty process cannot fill the
// disk.
type logWriter struct {
	mu    sync.Mutex
	path  string
	limit int64
	f     *os.File
	size  int64
}

func openLog(path string, limit int64) (*logWriter, error) {
	if limit <= 0 {
		limit = defaultLogLimit
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logWriter{path: path, limit: limit, f: f, size: fi.Size()}, nil
}

func (l *logWriter) stream(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		e := LogEntry{Time: time.Now().UTC(), Stream: name}
		if utf8.Valid(p) {
			e.Data = string(p)
		} else {
			e.Binary = p
		}
		line, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		line = append(line, '\n')
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.size+int64(len(line)) > l.limit {
			l.f.Close()
			os.Rename(l.path, l.path+".1")
			f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return 0, err
			}
			l.f, l.size = f, 0
		}
		n, err := l.f.Write(line)
		l.size += int64(n)
		if err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startMain starts the sandbox's main process with its output going to the
// log. The returned channel yields its exit.
func (s *Server) startMain(p sandbox.Process) (<-chan sandbox.Exit, error) {
	cmd, err := s.command(p)
	if err != nil {
		return nil, err
	}
	lw, err := openLog(s.cfg.LogFile, s.cfg.LogLimit)
	if err != nil {
		return nil, err
	}
	// Pipes, not the log file itself, so entries carry stream and time.
	or, ow, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = ow, ew
	cmd.SysProcAttr.Setpgid = true
	_, done, err := s.reaper.start(cmd)
	ow.Close()
	ew.Close()
	if err != nil {
		or.Close()
		er.Close()
		return nil, err
	}
	var pumps sync.WaitGroup
	for _, x := range []struct {
		r    *os.File
		name string
	}{{or, "stdout"}, {er, "stderr"}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			defer x.r.Close()
			io.Copy(lw.stream(x.name), x.r)
		}()
	}
	out := make(chan sandbox.Exit, 1)
	go func() {
		e := exitOf(<-done)
		waitTimeout(&pumps, 250*time.Millisecond)
		out <- e
	}()
	return out, nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	select {
	case <-c:
	case <-time.After(d):
	}
}
