package gvisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
)

var _ backend.Snapshotter = (*Backend)(nil)

// logFiles are the run-dir files the agent may hold open across a
// checkpoint; a restored copy must find them in its own run dir.
var logFiles = []string{"main.log", "main.log.1"}

// Checkpoint implements backend.Snapshotter. The agent first drops its
// host socket, which gVisor cannot save, then runsc saves the sandbox;
// a sandbox left running gets its identity back and serves again.
func (b *Backend) Checkpoint(ctx context.Context, s *backend.Spec, dir string, o backend.CheckpointOptions) error {
	if err := b.Guest(s).Quiesce(ctx); err != nil {
		return fmt.Errorf("checkpoint %s: quiesce agent: %w", s.ID, err)
	}
	var err error
	if b.proto.check() == nil {
		err = b.checkpointControl(ctx, s, dir, o.LeaveRunning)
	} else {
		args := []string{"checkpoint", "--image-path", dir}
		if o.LeaveRunning {
			args = append(args, "--leave-running")
		}
		err = b.runsc(ctx, s, append(args, s.ID)...)
	}
	if err == nil {
		err = backend.CopyFiles(layout{s.Dir}.run(), dir, logFiles)
	}
	if err == nil && o.Saved != nil {
		o.Saved()
	}
	if o.LeaveRunning || err != nil {
		// Whatever happened, the source must serve again.
		if rerr := b.resume(ctx, s, false); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	return nil
}

// Restore implements backend.Snapshotter. A sandbox already created (with
// Create) is restored into, which leaves runsc only the restore itself:
// fork creates its copies while the source is being saved. Without a
// network, that restore goes straight to the sandbox's control socket; a
// sandbox with one needs runsc's copy of its namespace's links and routes
// (setupNetwork), which only the CLI does.
func (b *Backend) Restore(ctx context.Context, s *backend.Spec, dir string) error {
	return b.RestoreFrom(ctx, s, func(context.Context) (string, error) { return dir, nil })
}

// RestoreFrom is Restore from the checkpoint that dir gives once it is
// whole. Into a created sandbox without a network, what needs no image
// is done first, while a fork's checkpoint is still being written: the
// copy's identity, runsc's state lock, the control connection and the
// network arguments. The restore itself then waits only for the image.
func (b *Backend) RestoreFrom(ctx context.Context, s *backend.Spec, dir func(context.Context) (string, error)) error {
	if err := b.restoreFrom(ctx, s, dir); err != nil {
		return fmt.Errorf("restore %s: %w", s.ID, err)
	}
	return b.booted(ctx, s)
}

func (b *Backend) restoreFrom(ctx context.Context, s *backend.Spec, dir func(context.Context) (string, error)) error {
	l := layout{s.Dir}
	st, _ := b.State(ctx, s)
	switch st {
	case backend.StatusCreated:
	case backend.StatusStopped:
		return fmt.Errorf("%w: the created sandbox died before the restore", backend.ErrNotRunning)
	default:
		if err := b.prepare(s); err != nil {
			return err
		}
	}
	// The identity is in place before the copy runs: its agent finds it
	// on its first look, and no time goes by between restore and serving.
	if err := writeIdentity(s, true); err != nil {
		return err
	}
	var pending *pendingRestore
	if st == backend.StatusCreated && s.NetNS == "" && b.proto.check() == nil {
		var err error
		if pending, err = b.beginRestore(ctx, s); err != nil {
			return err
		}
	}
	d, err := dir(ctx)
	if err == nil {
		err = backend.CopyFiles(d, l.run(), logFiles)
	}
	if err != nil {
		if pending != nil {
			pending.close()
		}
		return err
	}
	// --background: memory loads as it is touched, after runsc returns;
	// the sandbox holds the pages file open, so dir may go once it runs.
	// Not --direct: O_DIRECT reads serialise parallel restores.
	if pending != nil {
		return pending.finish(ctx, d)
	}
	return b.runsc(ctx, s, "restore", "--detach", "--background", "--bundle", l.bundle(), "--image-path", d, s.ID)
}

// resume hands the quiesced agent its identity and waits until it serves.
func (b *Backend) resume(ctx context.Context, s *backend.Spec, restored bool) error {
	if err := writeIdentity(s, restored); err != nil {
		return err
	}
	return b.waitAgent(ctx, s)
}

// writeIdentity leaves s's identity where its quiesced agent looks for it.
func writeIdentity(s *backend.Spec, restored bool) error {
	id := guest.Identity{Env: s.Env, MachineID: s.MachineID, Deadline: s.Deadline, Hostname: s.Hostname, Restored: restored}
	return writeJSON(filepath.Join(layout{s.Dir}.run(), "resume.json"), id)
}

// Pause implements backend.Snapshotter.
func (b *Backend) Pause(ctx context.Context, s *backend.Spec) error {
	if b.proto.check() == nil {
		return b.pauseControl(ctx, s)
	}
	return b.runsc(ctx, s, "pause", s.ID)
}

// Resume implements backend.Snapshotter.
func (b *Backend) Resume(ctx context.Context, s *backend.Spec) error {
	if b.proto.check() == nil {
		return b.resumeControl(ctx, s)
	}
	return b.runsc(ctx, s, "resume", s.ID)
}
