package network

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"smolvm.dev/smolvm/sandbox"
)

// maxEventLog bounds the deny log: past it the log rotates once, so a
// sandbox hammering a denied address costs at most twice this on disk.
const maxEventLog = 4 << 20

// eventLog appends events as JSON lines.
type eventLog struct {
	mu   sync.Mutex
	path string
}

func (l *eventLog) add(e sandbox.NetworkEvent) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fi, err := os.Stat(l.path); err == nil && fi.Size() > maxEventLog {
		os.Rename(l.path, l.path+".1")
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(e)
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Events returns sandbox id's deny log, oldest first.
func (h *Host) Events(id string) ([]sandbox.NetworkEvent, error) {
	p := filepath.Join(h.dir(id), fileEvents)
	var out []sandbox.NetworkEvent
	for _, f := range []string{p + ".1", p} {
		evs, err := readEvents(f)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

func readEvents(path string) ([]sandbox.NetworkEvent, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sandbox.NetworkEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e sandbox.NetworkEvent
		// A line cut short by a crash is skipped, not fatal.
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}
