package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// reaper collects every child that exits. As PID 1 the agent inherits all
// orphans, so it must wait(2) for any pid; it then hands each status to
// whoever started that pid. os/exec's Wait cannot be used alongside, since
// both would race for the same exits.
type reaper struct {
	mu        sync.Mutex
	waiters   map[int]chan unix.WaitStatus
	unclaimed map[int]unix.WaitStatus
}

// newReaper reaps until ctx ends. It must then stop: a second reaper in the
// same process (a restarted server, or tests) would otherwise steal its
// children's exits.
func newReaper(ctx context.Context) *reaper {
	r := &reaper{waiters: map[int]chan unix.WaitStatus{}, unclaimed: map[int]unix.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		defer signal.Stop(sigs)
		for {
			select {
			case <-sigs:
				r.reap()
			case <-ctx.Done():
				return
			}
		}
	}()
	return r
}

func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws
			continue
		}
		// An orphan, or a child whose starter has not registered yet.
		// Orphans are never claimed; cap the map so they cannot grow it.
		if len(r.unclaimed) < 4096 {
			r.unclaimed[pid] = ws
		}
	}
}

// start starts cmd and returns its pid and a channel that receives its exit
// status. cmd.Process is released: its Pid field is no longer valid.
// Holding the lock across Start means the reaper cannot collect the child
// before it is registered.
func (r *reaper) start(cmd *exec.Cmd) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return 0, nil, startError(cmd, err)
	}
	pid := cmd.Process.Pid
	// The reaper owns waiting; drop os.Process's handle (a pidfd).
	// Release sets Pid to -1: read it first (kill(-(-1)) is kill(1),
	// which once killed the guest itself).
	cmd.Process.Release()
	ch := make(chan unix.WaitStatus, 1)
	if ws, ok := r.unclaimed[pid]; ok {
		delete(r.unclaimed, pid)
		ch <- ws
		return pid, ch, nil
	}
	r.waiters[pid] = ch
	return pid, ch, nil
}

// exitOf converts a wait status into an Exit as a shell reports it.
func exitOf(ws unix.WaitStatus) sandbox.Exit {
	if ws.Signaled() {
		return sandbox.Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return sandbox.Exit{Code: ws.ExitStatus()}
}

// startError names the working directory when it is what failed: the
// child's chdir fails after the fork, and os/exec reports that as the
// program's ("fork/exec /bin/bash: no such file or directory").
func startError(cmd *exec.Cmd, err error) error {
	fi, serr := os.Stat(cmd.Dir)
	var pe *fs.PathError
	switch {
	case cmd.Dir == "":
		return err
	case errors.As(serr, &pe):
		return fmt.Errorf("working directory %s: %w", cmd.Dir, pe.Err)
	case serr == nil && !fi.IsDir():
		return fmt.Errorf("working directory %s: %w", cmd.Dir, syscall.ENOTDIR)
	}
	return err
}
