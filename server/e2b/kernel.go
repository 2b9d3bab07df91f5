package e2b

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// The code interpreter (@e2b/code-interpreter) talks to a server on port
// 49999 inside the sandbox, reached like any port (servePort). smolvm's is
// kernel/kernel.py: Python's standard library only, one interpreter
// process per context (kernel/worker.js for JavaScript, where the image
// has node). A sandbox of the template e2bapi.CodeInterpreterTemplate (the SDK's
// default) has it from the start: a cold create or one from a warm pool of
// that name starts it (withKernel). Any other sandbox whose image has
// python3 gets it at its first request to the port, when nothing listens
// there (kernels.ensure): a sandbox of another template, or one restored
// from a checkpoint taken while the kernel was down. Its interpreters live
// in the sandbox's memory, so a fork or checkpoint copies them.

var (
	//go:embed kernel/kernel.py
	kernelScript []byte
	//go:embed kernel/worker.js
	kernelWorkerJS []byte
)

const (
	kernelPort       = 49999
	kernelPath       = "/opt/smolvm/kernel.py"
	kernelWorkerPath = "/opt/smolvm/worker.js" // beside kernelPath: kernel.py looks there
	// kernelStartTimeout bounds the wait for the kernel to listen.
	kernelStartTimeout = 15 * time.Second
	// maxKernelsUp bounds the sandboxes kernels remembers; past it, it
	// forgets them all (each then costs one more check).
	maxKernelsUp = 4096
)

// kernels remembers the sandboxes whose kernel answered, so that only a
// sandbox's first request to kernelPort, or the first after one that
// failed, pays for the check (a dial through the agent), and starts the
// kernel once however many requests find it down.
type kernels struct {
	mu     sync.Mutex
	up     map[string]bool
	starts singleflight.Group
}

func newKernels() *kernels { return &kernels{up: map[string]bool{}} }

// ensure makes sure the kernel of sandbox id listens, starting it if
// nothing does.
func (k *kernels) ensure(ctx context.Context, h *Handler, id string) error {
	if k.known(id) {
		return nil
	}
	// Not bound to this request: the start is shared with the others
	// that wait for it, and startKernel bounds itself.
	_, err, _ := k.starts.Do(id, func() (any, error) {
		if err := h.ensureKernel(context.WithoutCancel(ctx), id); err != nil {
			return nil, err
		}
		k.mark(id)
		return nil, nil
	})
	return err
}

// known reports whether sandbox id's kernel answered (or was started).
func (k *kernels) known(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.up[id]
}

// mark records that sandbox id's kernel listens: started there, or
// carried into a copy from a source whose kernel is known.
func (k *kernels) mark(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.up) >= maxKernelsUp {
		clear(k.up)
	}
	k.up[id] = true
}

// forget makes the next request to sandbox id's kernel check it again.
func (k *kernels) forget(id string) {
	k.mu.Lock()
	delete(k.up, id)
	k.mu.Unlock()
}

// withKernel starts the code interpreter in sb, a new sandbox of the
// code interpreter's template, and removes sb if it cannot.
func (h *Handler) withKernel(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	if err := h.startKernel(ctx, sb.ID); err != nil {
		h.m.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return nil, err
	}
	h.kernels.mark(sb.ID)
	return sb, nil
}

// ensureKernel starts the code interpreter in sandbox id unless
// something listens on its port.
func (h *Handler) ensureKernel(ctx context.Context, id string) error {
	c, err := h.m.DialPort(ctx, id, kernelPort)
	if err == nil {
		c.Close()
		return nil
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		return fmt.Errorf("code interpreter: %w", err)
	}
	return h.startKernel(ctx, id)
}

// noPython is startKernel's exit code for an image without python3.
const noPython = 127

// startKernel starts the code interpreter's server in sandbox id and
// returns once it listens.
func (h *Handler) startKernel(ctx context.Context, id string) error {
	for path, data := range map[string][]byte{kernelPath: kernelScript, kernelWorkerPath: kernelWorkerJS} {
		if err := h.m.WriteFile(ctx, id, path, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("code interpreter: %w", err)
		}
	}
	script := fmt.Sprintf("command -v python3 >/dev/null || exit %d; python3 %s %d >/tmp/smolvm-kernel.log 2>&1 &", noPython, kernelPath, kernelPort)
	exit, err := h.m.Exec(ctx, id, sandbox.Process{Args: []string{"/bin/sh", "-c", script}}, sandbox.Stdio{})
	switch {
	case err != nil:
		return fmt.Errorf("code interpreter: start: %w", err)
	case exit.Code == noPython:
		return errdefs.New(errdefs.ErrUnsupported, fmt.Sprintf("code interpreter: sandbox %s has no python3 (the kernel on port %d needs it in the image)", id, kernelPort))
	case exit.Code != 0:
		return fmt.Errorf("code interpreter: start: exit %d %s", exit.Code, exit.Error)
	}
	wctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		c, err := h.m.DialPort(wctx, id, kernelPort)
		if err == nil {
			c.Close()
			return nil
		}
		if !errors.Is(err, errdefs.ErrUnavailable) {
			return fmt.Errorf("code interpreter: %w", err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("code interpreter: not listening on %d after %s (see /tmp/smolvm-kernel.log): %w", kernelPort, kernelStartTimeout, err)
		case <-time.After(delay):
		}
	}
}
