package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/runtime/backend/gvisor"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/runtime/snapshot"
	"smolvm.dev/smolvm/workflow/trust"
)

// runscPath finds runsc: the flag or $SMOLVM_RUNSC, then beside the smolvm
// binary, then $PATH.
func (a *app) runscPath() (string, error) {
	if a.runsc != "" {
		if _, err := os.Stat(a.runsc); err != nil {
			return "", fmt.Errorf("runsc %s: %w (%s)", a.runsc, err, installHint)
		}
		return a.runsc, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "runsc")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p, nil
	}
	return "", errors.New("runsc not found: " + installHint)
}

const installHint = "install it with scripts/install.sh (builds the pinned gVisor runsc), or point --runsc / SMOLVM_RUNSC at one"

// guestBinary finds smolvm-guest, the static binary that runs as PID 1 in
// every sandbox: $SMOLVM_GUEST_BINARY, beside smolvm, then $PATH.
func guestBinary() (string, error) {
	if p := os.Getenv("SMOLVM_GUEST_BINARY"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "smolvm-guest")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("smolvm-guest"); err == nil {
		return p, nil
	}
	return "", errors.New("smolvm-guest not found: install it beside smolvm (scripts/install.sh does), or set SMOLVM_GUEST_BINARY")
}

// env is what sandbox commands work with.
type env struct {
	st     *store.Store
	images *image.Store
	snaps  *snapshot.Store
	mgr    *manager.Manager
}

func (e *env) Close() error { return e.mgr.Close() }

// open opens the data dir's sandbox manager, over the gVisor backend, and
// its stores.
func (a *app) open(ctx context.Context) (*env, error) {
	runsc, err := a.runscPath()
	if err != nil {
		return nil, err
	}
	be, err := gvisor.New(gvisor.Config{Runsc: runsc, Debug: os.Getenv("SMOLVM_DEBUG") != ""})
	if err != nil {
		return nil, err
	}
	bin, err := guestBinary()
	if err != nil {
		return nil, err
	}
	def, err := a.defaultBackend()
	if err != nil {
		return nil, err
	}
	bs, err := a.addVM([]backend.Backend{be}, def)
	if err != nil {
		return nil, err
	}
	c := manager.Config{
		DataDir: a.dataDir, Backends: bs, DefaultBackend: def, GuestBinary: bin,
		// The host namespace and upstream DNS are overridable for tests,
		// which must never send traffic off the machine.
		Network: &network.Host{NetNS: os.Getenv("SMOLVM_NET_NETNS"), Resolver: os.Getenv("SMOLVM_NET_RESOLVER")},
		Gate:    func(st *store.Store) manager.Gate { return trust.NewGates(st) },
	}
	if a.self != "" {
		if !a.noRefill {
			c.Refill = func(pool string) { a.spawnFill(runsc, pool) }
		}
		c.Network.Helper = []string{a.self, "--data-dir", a.dataDir, "net-helper"}
	}
	m, err := manager.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	return &env{st: m.Store(), images: m.Images(), snaps: m.Snapshots(), mgr: m}, nil
}
