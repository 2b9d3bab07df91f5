package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// stateFile is runsc's state file of one container, read under runsc's
// own lock (runsc/container.StateFile: an flock on the .lock file beside
// it), so that an operation smolvm makes over the control socket and the
// state change runsc would record for it are one step to any runsc
// command.
type stateFile struct {
	path string
	lock *os.File
	raw  map[string]json.RawMessage
	st   runscState
}

// statePath is the state file of container id under the runsc root dir.
func statePath(root, id, ext string) string {
	return filepath.Join(root, id+"_sandbox:"+id+"."+ext)
}

// lockState takes runsc's lock on container id's state file and reads it.
// A runsc command holds the lock for the whole of its operation, so the
// wait polls, and ends with ctx.
func lockState(ctx context.Context, root, id string) (*stateFile, error) {
	lf, err := os.OpenFile(statePath(root, id, "lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: runsc state lock: %w", id, err)
	}
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		err = unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			break
		}
		select {
		case <-ctx.Done():
			lf.Close()
			return nil, fmt.Errorf("%s: runsc state lock: %w", id, ctx.Err())
		case <-time.After(delay):
		}
	}
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: runsc state lock: %w", id, err)
	}
	sf := &stateFile{path: statePath(root, id, "state"), lock: lf}
	p, err := os.ReadFile(sf.path)
	if err == nil {
		err = json.Unmarshal(p, &sf.raw)
	}
	if err == nil {
		err = json.Unmarshal(p, &sf.st)
	}
	if err == nil {
		err = sf.st.complete()
	}
	if err != nil {
		sf.unlock()
		return nil, fmt.Errorf("%s: runsc state: %w", id, err)
	}
	return sf, nil
}

// complete checks that the state file has what the control path needs;
// a runsc that wrote another shape is not one smolvm speaks to.
func (st *runscState) complete() error {
	for field, ok := range map[string]bool{
		"status":                    st.Status != "",
		"sandbox.pid":               st.Sandbox.Pid > 0,
		"sandbox.controlSocketPath": st.Sandbox.ControlSocketPath != "",
	} {
		if !ok {
			return fmt.Errorf("%w: the state file has no %s", errProtocol, field)
		}
	}
	return nil
}

// save records status, and restored (the sandbox's Restored flag) if set,
// as runsc's saveLocked would: every other field is written back as read.
// The file is replaced whole, so that a reader without the lock (State)
// never sees half of it.
func (sf *stateFile) save(status string, restored bool) error {
	set := func(m map[string]json.RawMessage, k string, v any) error {
		p, err := json.Marshal(v)
		m[k] = p
		return err
	}
	if err := set(sf.raw, "status", status); err != nil {
		return err
	}
	if restored {
		var sb map[string]json.RawMessage
		if err := json.Unmarshal(sf.raw["sandbox"], &sb); err != nil {
			return fmt.Errorf("runsc state: %w", err)
		}
		if err := set(sb, "restored", true); err != nil {
			return err
		}
		if err := set(sf.raw, "sandbox", sb); err != nil {
			return err
		}
	}
	p, err := json.Marshal(sf.raw)
	if err != nil {
		return err
	}
	tmp := sf.path + ".smolvm"
	if err := os.WriteFile(tmp, p, 0o640); err != nil {
		return fmt.Errorf("runsc state: %w", err)
	}
	if err := os.Rename(tmp, sf.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("runsc state: %w", err)
	}
	sf.st.Status = status
	return nil
}

func (sf *stateFile) unlock() {
	unix.Flock(int(sf.lock.Fd()), unix.LOCK_UN)
	sf.lock.Close()
}
