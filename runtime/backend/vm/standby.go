package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/vm/ramfd"
)

// A created sandbox has a standby: a QEMU launched ahead, with its relay,
// that waits in -preconfig with -incoming defer. What a restore then
// costs is the checkpoint's load, not QEMU's start (process, libraries,
// accelerator, devices' backends). This makes the manager's restore
// targets (pool --targets) a pool of pre-launched QEMUs, and a fork's
// copies, created while the source is being saved, launch theirs
// meanwhile. A restore into a sandbox without one launches one first:
// every copy is built this way. A checkpoint's RAM file and disk chain
// are not known at launch, so the machine is built only at the restore
// (build).
//
// A standby drops root at its start, as a booted QEMU does: before the
// restore hands it any guest data, and before it opens a checkpoint's
// files. Its disk chain is made reachable by its uid through the dir it
// holds open (diskNode), and its open of the RAM file, which QEMU 7.2
// makes read-write, is answered with the file opened read-only (ramfd):
// it maps it copy-on-write, and no copy can write what its siblings map.
//
// standby.json holds the launch the standby was started with; a restore
// uses it only if the checkpoint ran the same kernel, initramfs, image
// disk, memory and vCPUs, and otherwise launches QEMU anew.

// ErrStandbyDied is a restore into a sandbox whose pre-launched QEMU
// ended while it waited (killed, out of memory). What it left is removed
// first, so the sandbox reads as created, without one, and a restore
// into it launches QEMU anew.
var ErrStandbyDied = errdefs.New(errdefs.ErrUnavailable, "the pre-launched QEMU died while idle")

// standbyWait bounds the wait for a standby's monitor at Create: QEMU
// opens it early in its start, well under a second here under TCG.
const standbyWait = 30 * time.Second

// prelaunch starts s's standby for ln and returns once its monitor
// answers.
func (b *Backend) prelaunch(ctx context.Context, s *backend.Spec, ln launch) error {
	l := layout{s.Dir}
	ln.CowRAM = "" // a checkpoint's, not the launch's
	// Written first: a crash before QEMU is up leaves a sandbox that
	// reads as stopped, not one that reads as created without a standby.
	if err := writeJSON(l.standby(), ln); err != nil {
		return err
	}
	if err := b.startRelay(s); err != nil {
		return err
	}
	if err := b.startQEMU(s, ln, true); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, standbyWait)
	defer cancel()
	// Its start makes an open the filter holds (ramfd): let such opens
	// through until its monitor answers, which it does once started.
	stop, err := b.letThrough(ctx, s)
	if err != nil {
		return err
	}
	defer stop()
	for {
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		q, err := dialQMP(dctx, l.qmp())
		dcancel()
		if err == nil {
			return q.Close()
		}
		if _, ok := b.qemu(s); !ok {
			return fmt.Errorf("QEMU ended at launch%s", b.bootError(s))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("QEMU's monitor did not answer in %v (load %s): %w", standbyWait, loadAvg(), err)
		}
	}
}

// letThrough lets s's pre-launched QEMU make the opens its filter holds
// (ramfd), as itself, until stop is called.
func (b *Backend) letThrough(ctx context.Context, s *backend.Spec) (stop func(), err error) {
	lis, err := b.listener(ctx, s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		lis.LetThrough(ctx)
		close(done)
	}()
	return func() {
		cancel()
		<-done
		lis.Close()
	}, nil
}

// listener takes the listener of s's pre-launched QEMU.
func (b *Backend) listener(ctx context.Context, s *backend.Spec) (*ramfd.Listener, error) {
	pid, ok := b.qemu(s)
	if !ok {
		return nil, fmt.Errorf("%w%s", ErrStandbyDied, b.bootError(s))
	}
	lis, err := ramfd.Take(ctx, pid)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, b.bootError(s))
	}
	return lis, nil
}

// takeStandby reports whether s has a standby that can load a checkpoint
// of ln. One launched for other files, or not through ramfd, is ended;
// one that died while it waited is an error, its leftovers removed.
func (b *Backend) takeStandby(s *backend.Spec, ln launch) (bool, error) {
	var was launch
	if err := readJSON(layout{s.Dir}.standby(), &was); err != nil {
		return false, nil
	}
	pid, ok := b.qemu(s)
	if !ok {
		why := b.bootError(s)
		b.dropStandby(s)
		return false, fmt.Errorf("%w%s", ErrStandbyDied, why)
	}
	ln.CowRAM = ""
	// One an older smolvm launched, not through ramfd, cannot be handed
	// its RAM file.
	if was != ln || !ramfd.Started(pid) {
		b.dropStandby(s)
		return false, nil
	}
	return true, nil
}

// dropStandby ends s's standby, if it has one. The files go first, so
// that s reads as created throughout, never as stopped.
func (b *Backend) dropStandby(s *backend.Spec) {
	l := layout{s.Dir}
	if _, err := os.Stat(l.standby()); err != nil {
		return
	}
	qemu, qok := b.qemu(s)
	relay, rok := b.relay(s)
	os.Remove(l.standby())
	os.Remove(l.qemuPid())
	os.Remove(l.relayPid())
	if rok {
		unix.Kill(relay, unix.SIGKILL)
	}
	if qok {
		unix.Kill(qemu, unix.SIGKILL)
	}
}

// build makes a standby's machine over QMP: the RAM object on the
// checkpoint's file (mapped copy-on-write) and the writable disk, both
// named by the command line's -device and -M, then leaves preconfig.
// The QEMU has dropped root by now (and cannot be handed files before
// preconfig ends: add-fd is refused): its disks are made reachable by its
// uid (diskNode), and its RAM file handed to it read-only (addRAM).
// The order matters: object-add the RAM, qom-set /machine's
// memory-backend, blockdev-add the disk (the -device names it), then
// x-exit-preconfig, which is when the machine is built.
func (b *Backend) build(ctx context.Context, q *qmp, s *backend.Spec, ln launch) error {
	uid, err := sandboxUID(b.cfg.Cache, s.Dir)
	if err != nil {
		return err
	}
	disk, err := diskNode(layout{s.Dir}, uid)
	if err != nil {
		return err
	}
	if err := b.addRAM(ctx, q, s, ln); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		args any
	}{
		{"qom-set", map[string]any{"path": "/machine", "property": "memory-backend", "value": "mem"}},
		{"blockdev-add", disk},
		{"x-exit-preconfig", nil},
	} {
		if _, err := q.run(ctx, c.name, c.args); err != nil {
			return err
		}
	}
	return nil
}

// addRAM adds the RAM object, answering QEMU's read-write open of the
// checkpoint's RAM file with that file opened read-only.
func (b *Backend) addRAM(ctx context.Context, q *qmp, s *backend.Spec, ln launch) error {
	lis, err := b.listener(ctx, s)
	if err != nil {
		return err
	}
	defer lis.Close()
	ram, err := os.Open(ln.CowRAM)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLoad, err)
	}
	defer ram.Close()
	actx, cancel := context.WithCancel(ctx)
	answered := make(chan error, 1)
	go func() { answered <- lis.Answer(actx, ln.CowRAM, ram) }()
	_, err = q.run(ctx, "object-add", map[string]any{"qom-type": "memory-backend-file", "id": "mem", "size": ln.Memory, "mem-path": ln.CowRAM, "share": false})
	cancel()
	// QEMU answers object-add only once its open is answered, unless the
	// command failed before opening anything.
	if aerr := <-answered; err == nil && aerr != nil {
		err = fmt.Errorf("QEMU built its RAM without opening %s: %w", ln.CowRAM, aerr)
	}
	return err
}

// qemuDir is the sandbox's dir as its pre-launched QEMU reaches it: the
// directory it holds open as fd 4 (startQEMU), since the dir's parents
// are root's alone.
const qemuDir = "/proc/self/fd/4"

// diskNode makes the disk chain in l reachable by the QEMU of uid, and
// returns the blockdev-add arguments naming it through qemuDir:
// disk.qcow2 over base-K.qcow2 … base-1.qcow2 over the blank disk, each
// backing node given (the images name the blank disk by its path in the
// cache, which is root's alone). The sandbox's dir becomes searchable by
// uid alone, where every file but its run dir and these is root's 0600.
// disk.qcow2 becomes uid's. The layers below are read-only and shared by
// hard links with their checkpoint and its other copies, of other uids:
// they are made readable by all (0644), which reach them only through
// the dirs of the sandboxes that hold them; the blank disk, an empty file
// system, is linked beside them.
func diskNode(l layout, uid int) (map[string]any, error) {
	chain, err := bases(l.dir)
	if err != nil {
		return nil, err
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no base under %s", ErrLoad, l.disk())
	}
	blank, err := backingName(filepath.Join(l.dir, chain[0]))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrLoad, err)
	}
	if !filepath.IsAbs(blank) {
		blank = filepath.Join(l.dir, blank)
	}
	if err := link(blank, l.blank()); err != nil {
		return nil, err
	}
	node := map[string]any{"driver": "raw", "file": qemuFile(l.blank())}
	for _, name := range chain {
		node = map[string]any{"driver": "qcow2", "file": qemuFile(filepath.Join(l.dir, name)), "backing": node}
	}
	for _, f := range append([]string{l.blank()}, chain...) {
		if err := os.Chmod(filepath.Join(l.dir, filepath.Base(f)), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.Chown(l.disk(), uid, uid); err != nil {
		return nil, err
	}
	if err := os.Chown(l.dir, 0, uid); err != nil {
		return nil, err
	}
	if err := os.Chmod(l.dir, 0o710); err != nil {
		return nil, err
	}
	return map[string]any{"driver": "qcow2", "node-name": "disk", "file": qemuFile(l.disk()), "backing": node}, nil
}

// qemuFile is the file node of path, a file of the sandbox's dir, as its
// pre-launched QEMU opens it.
func qemuFile(path string) map[string]any {
	return map[string]any{"driver": "file", "filename": qemuDir + "/" + filepath.Base(path)}
}
