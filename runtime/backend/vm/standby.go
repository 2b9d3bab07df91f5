package vm

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/backend"
)

// A created sandbox has a standby: a QEMU launched ahead, with its relay,
// that waits in -preconfig with -incoming defer. What a restore then
// costs is the checkpoint's load, not QEMU's start (process, libraries,
// accelerator, devices' backends). This makes the manager's restore
// targets (pool --targets) a pool of pre-launched QEMUs, and a fork's
// copies, created while the source is being saved, launch theirs
// meanwhile. A checkpoint's RAM file and disk chain are not known at
// launch, so the machine is built only at the restore (standbyCommands).
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

// prelaunch starts s's standby and returns once its monitor answers.
func (b *Backend) prelaunch(ctx context.Context, s *backend.Spec) error {
	l := layout{s.Dir}
	var ln launch
	if err := readJSON(l.launch(), &ln); err != nil {
		return fmt.Errorf("not created: %w", err)
	}
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

// takeStandby reports whether s has a standby that can load a checkpoint
// of ln. One launched for other files is ended; one that died while it
// waited is an error, its leftovers removed.
func (b *Backend) takeStandby(s *backend.Spec, ln launch) (bool, error) {
	var was launch
	if err := readJSON(layout{s.Dir}.standby(), &was); err != nil {
		return false, nil
	}
	if _, ok := b.qemu(s); !ok {
		why := b.bootError(s)
		b.dropStandby(s)
		return false, fmt.Errorf("%w%s", ErrStandbyDied, why)
	}
	ln.CowRAM = ""
	if was != ln {
		b.dropStandby(s)
		return false, nil
	}
	return true, nil
}

// dropStandby ends s's standby, if it has one. The files go first, so
// that s reads as created throughout, never as stopped; the relay dies
// before QEMU, so that it cannot unlink a successor's agent socket on
// seeing QEMU go.
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

// standbyCommands build a standby's machine over QMP: the RAM object on
// the checkpoint's file (mapped copy-on-write) and the writable disk, both
// named by the command line's -device and -M, then leave preconfig.
func standbyCommands(l layout, ln launch) []qmpCommand {
	return []qmpCommand{
		{"object-add", map[string]any{"qom-type": "memory-backend-file", "id": "mem", "size": ln.Memory, "mem-path": ln.CowRAM, "share": false}},
		{"qom-set", map[string]any{"path": "/machine", "property": "memory-backend", "value": "mem"}},
		{"blockdev-add", map[string]any{"driver": "qcow2", "node-name": "disk", "file": map[string]any{"driver": "file", "filename": l.disk()}}},
		{"x-exit-preconfig", nil},
	}
}

// qmpCommand is one QMP command and its arguments.
type qmpCommand struct {
	name string
	args any
}
