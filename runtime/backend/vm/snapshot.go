package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/guest"
)

var _ backend.Snapshotter = (*Backend)(nil)

// A checkpoint is a directory of: the guest's RAM file (ram), the device
// state as a migration stream that skips that RAM (state, x-ignore-shared),
// the writable disk frozen at that moment (disk.qcow2, backed by the
// shared blank disk), the launch parameters QEMU must be started with
// again (vm.json: same kernel, initramfs, image and memory), and the
// main log.
const (
	snapState  = "state"
	snapRAM    = "ram"
	snapDisk   = "disk.qcow2"
	snapLaunch = "vm.json"
)

// A disk is a qcow2 chain kept whole in the directory that holds it:
// disk.qcow2 over base-K.qcow2 … over base-1.qcow2 (each backing file
// named relative to the directory), the last over the shared blank disk
// (by absolute path, a cache file no one removes). A copy links its
// checkpoint's chain into its own directory, the checkpoint's disk.qcow2
// as base-K+1 under a new overlay, so it keeps its disk when the
// checkpoint goes (a fork's scratch checkpoint goes once the copies run);
// a checkpoint of the copy links its chain back in the same way.
const basePattern = "base-%d.qcow2"

// bases returns the names of the base-N.qcow2 files in dir, N from 1 up.
func bases(dir string) ([]string, error) {
	var names []string
	for n := 1; ; n++ {
		name := fmt.Sprintf(basePattern, n)
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			return names, nil
		} else if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
}

// linkChain links each of names from src into dst.
func linkChain(src, dst string, names ...string) error {
	for _, name := range names {
		if err := link(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

// link makes to a hard link of from (a copy across file systems): the
// files of a chain are never written.
func link(from, to string) error {
	os.Remove(to)
	if err := os.Link(from, to); err != nil {
		return run("cp", "--sparse=always", from, to)
	}
	return nil
}

// ErrLoad is a checkpoint this backend cannot restore: files missing or
// damaged, or QEMU refusing the stream.
var ErrLoad = errdefs.New(errdefs.ErrCorrupt, "cannot load VM checkpoint")

// logFiles are the run-dir files a copy takes from its checkpoint.
var logFiles = []string{"main.log", "main.log.1"}

// Checkpoint implements backend.Snapshotter: the agent drops its
// connections, QEMU stops and writes its device state, and the RAM file
// and disk are copied; a sandbox left running then continues and gets
// its identity back.
func (b *Backend) Checkpoint(ctx context.Context, s *backend.Spec, dir string, o backend.CheckpointOptions) error {
	if err := b.Guest(s).Quiesce(ctx); err != nil {
		return fmt.Errorf("checkpoint %s: quiesce agent: %w", s.ID, err)
	}
	// The relay would take connections the stopped VM cannot answer: hide
	// its socket, as a quiesced agent under gVisor removes its own, so
	// that clients fail to dial (guest.ErrNotListening) and retry.
	l := layout{s.Dir}
	if err := os.Rename(l.agent(), l.agent()+".quiesced"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	err := b.save(ctx, s, dir)
	if err == nil && o.Saved != nil {
		o.Saved()
	}
	if o.LeaveRunning || err != nil {
		// Whatever happened, the source must serve again.
		if rerr := b.resume(ctx, s); rerr != nil {
			err = errors.Join(err, rerr)
		}
	} else if pid, ok := b.qemu(s); ok {
		killWait(b, s, pid)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.ID, err)
	}
	return nil
}

func (b *Backend) save(ctx context.Context, s *backend.Spec, dir string) error {
	l := layout{s.Dir}
	q, err := dialQMP(ctx, l.qmp())
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.ignoreShared(ctx); err != nil {
		return err
	}
	if _, err := q.run(ctx, "stop", nil); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, snapState), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := q.sendFD(ctx, "snap", f); err != nil {
		return err
	}
	if _, err := q.run(ctx, "migrate", map[string]any{"uri": "fd:snap"}); err != nil {
		return err
	}
	if err := q.waitMigration(ctx); err != nil {
		return fmt.Errorf("%w%s", err, b.bootError(s))
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// QEMU flushed the disk for the migration, and the guest stands still.
	if err := run("cp", "--sparse=always", l.disk(), filepath.Join(dir, snapDisk)); err != nil {
		return err
	}
	chain, err := bases(s.Dir)
	if err != nil {
		return err
	}
	if err := linkChain(s.Dir, dir, chain...); err != nil {
		return err
	}
	var ln launch
	if err := readJSON(l.launch(), &ln); err != nil {
		return err
	}
	if ln.CowRAM == "" {
		if err := run("cp", "--sparse=always", l.ram(), filepath.Join(dir, snapRAM)); err != nil {
			return err
		}
	} else {
		// A copy's RAM is private, so x-ignore-shared left it in the
		// stream, every page: the checkpoint's RAM file is only a hole
		// of the right size for the stream to fill at restore.
		f, err := os.OpenFile(filepath.Join(dir, snapRAM), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		err = f.Truncate(ln.Memory)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		ln.CowRAM = ""
	}
	if err := writeJSON(filepath.Join(dir, snapLaunch), ln); err != nil {
		return err
	}
	return backend.CopyFiles(l.run(), dir, logFiles)
}

// resume continues a VM stopped for a checkpoint and hands its agent
// its identity.
func (b *Backend) resume(ctx context.Context, s *backend.Spec) error {
	q, err := dialQMP(ctx, layout{s.Dir}.qmp())
	if err != nil {
		return err
	}
	defer q.Close()
	if _, err := q.run(ctx, "cont", nil); err != nil {
		return err
	}
	if err := b.writeIdentity(s, false); err != nil {
		return err
	}
	l := layout{s.Dir}
	if err := os.Rename(l.agent()+".quiesced", l.agent()); err != nil {
		return err
	}
	return b.waitAgent(ctx, s)
}

// writeIdentity leaves s's identity in its run dir, from where the relay
// sends it to the quiesced agent: the relay's, as it appears, for the
// relay to read and remove.
func (b *Backend) writeIdentity(s *backend.Spec, restored bool) error {
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil {
		return err
	}
	id := guest.Identity{Env: s.Env, MachineID: s.MachineID, Deadline: s.Deadline, Hostname: s.Hostname, Restored: restored}
	return writeJSONAs(filepath.Join(layout{s.Dir}.run(), "resume.json"), id, uid)
}

// Restore implements backend.Snapshotter: s's pre-launched QEMU (launched
// now if it has none) maps the checkpoint's RAM file copy-on-write, over
// an overlay of the frozen disk, and loads the device state.
func (b *Backend) Restore(ctx context.Context, s *backend.Spec, dir string) error {
	if err := b.restore(ctx, s, dir); err != nil {
		return fmt.Errorf("restore %s: %w", s.ID, err)
	}
	return nil
}

func (b *Backend) restore(ctx context.Context, s *backend.Spec, dir string) error {
	l := layout{s.Dir}
	var ln launch
	if err := readJSON(filepath.Join(dir, snapLaunch), &ln); err != nil {
		return fmt.Errorf("%w: %v", ErrLoad, err)
	}
	for _, f := range []string{filepath.Join(dir, snapState), filepath.Join(dir, snapRAM), filepath.Join(dir, snapDisk), ln.Kernel, ln.Initrd, ln.Image} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w: %v", ErrLoad, err)
		}
	}
	standby, err := b.takeStandby(s, ln)
	if err != nil {
		return err
	}
	if st, _ := b.State(ctx, s); st != backend.StatusCreated {
		if _, err := b.create(s); err != nil {
			return err
		}
	}
	chain, err := bases(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLoad, err)
	}
	old, err := bases(s.Dir)
	if err != nil {
		return err
	}
	for _, name := range old {
		os.Remove(filepath.Join(s.Dir, name))
	}
	top := fmt.Sprintf(basePattern, len(chain)+1)
	if err := linkChain(dir, s.Dir, chain...); err != nil {
		return err
	}
	if err := link(filepath.Join(dir, snapDisk), filepath.Join(s.Dir, top)); err != nil {
		return err
	}
	os.Remove(l.disk())
	// Relative: qemu-img resolves it beside the overlay.
	if err := overlay(l.disk(), top, "qcow2"); err != nil {
		return err
	}
	// The copy maps the checkpoint's RAM copy-on-write rather than
	// copying it: N copies share its pages until they write them. The
	// mapping outlives the file, should the checkpoint go first (a
	// fork's scratch checkpoint goes once its copies run).
	ram, err := filepath.Abs(filepath.Join(dir, snapRAM))
	if err != nil {
		return err
	}
	os.Remove(l.ram())
	ln.CowRAM = ram
	// The copy must boot what the checkpoint ran, whatever s says.
	if err := writeJSON(l.launch(), ln); err != nil {
		return err
	}
	if err := backend.CopyFiles(dir, l.run(), logFiles); err != nil {
		return err
	}
	if err := b.writeIdentity(s, true); err != nil {
		return err
	}
	// The logs copied in are the relay's to append to.
	if err := b.giveRun(s); err != nil {
		return err
	}
	if err := b.load(ctx, s, filepath.Join(dir, snapState), ln, standby); err != nil {
		// Stopped, not created: a later restore launches afresh.
		b.halt(s)
		os.Remove(l.standby())
		return err
	}
	// The standby is now the sandbox's VM.
	os.Remove(l.standby())
	return b.waitAgent(ctx, s)
}

// load builds the machine of s's standby for ln, launching the standby
// first if s has none, and feeds it its device state.
func (b *Backend) load(ctx context.Context, s *backend.Spec, state string, ln launch, standby bool) error {
	if !standby {
		if err := b.prelaunch(ctx, s, ln); err != nil {
			return err
		}
	}
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	q, err := dialQMP(qctx, layout{s.Dir}.qmp())
	if err != nil {
		return fmt.Errorf("%w%s", err, b.bootError(s))
	}
	defer q.Close()
	if err := b.build(qctx, q, s, ln); err != nil {
		return fmt.Errorf("pre-launched QEMU: %w%s", err, b.bootError(s))
	}
	if err := q.ignoreShared(qctx); err != nil {
		return err
	}
	f, err := os.Open(state)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLoad, err)
	}
	defer f.Close()
	if err := q.sendFD(qctx, "snap", f); err != nil {
		return err
	}
	if _, err := q.run(qctx, "migrate-incoming", map[string]any{"uri": "fd:snap"}); err != nil {
		return fmt.Errorf("%w: %v", ErrLoad, err)
	}
	if err := q.waitMigration(qctx); err != nil {
		return fmt.Errorf("%w: %v%s", ErrLoad, err, b.bootError(s))
	}
	// The source was stopped when saved, and the copy takes on that
	// run state: start it.
	_, err = q.run(qctx, "cont", nil)
	return err
}

// Pause implements backend.Snapshotter.
func (b *Backend) Pause(ctx context.Context, s *backend.Spec) error {
	if err := b.qmpRun(ctx, s, "stop"); err != nil {
		return fmt.Errorf("pause %s: %w", s.ID, err)
	}
	return os.WriteFile(b.pausedFile(s), nil, 0o600)
}

// Resume implements backend.Snapshotter.
func (b *Backend) Resume(ctx context.Context, s *backend.Spec) error {
	if err := b.qmpRun(ctx, s, "cont"); err != nil {
		return fmt.Errorf("resume %s: %w", s.ID, err)
	}
	return os.Remove(b.pausedFile(s))
}

func (b *Backend) qmpRun(ctx context.Context, s *backend.Spec, cmd string) error {
	if _, ok := b.qemu(s); !ok {
		return backend.ErrNotRunning
	}
	q, err := dialQMP(ctx, layout{s.Dir}.qmp())
	if err != nil {
		return err
	}
	defer q.Close()
	_, err = q.run(ctx, cmd, nil)
	return err
}
