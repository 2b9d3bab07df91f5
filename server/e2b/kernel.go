package e2b

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/sandbox"
)

// The code interpreter (@e2b/code-interpreter) talks to a server on port
// 49999 inside the sandbox, reached like any port (servePort). smolvm's is
// kernel/kernel.py: Python's standard library only, one interpreter
// process per context (kernel/worker.js for JavaScript, where the image
// has node). Every sandbox of the template codeInterpreterTemplate (the
// SDK's default) runs it, however it is made: a cold create or one from a
// warm pool of that name starts it (withKernel); its interpreters live in
// the sandbox's memory, so a fork or checkpoint copies them, and a restore
// starts it again only if it was down when the checkpoint was taken
// (ensureKernel).

var (
	//go:embed kernel/kernel.py
	kernelScript []byte
	//go:embed kernel/worker.js
	kernelWorkerJS []byte
)

const (
	codeInterpreterTemplate = "code-interpreter-v1"
	kernelPort              = 49999
	kernelPath              = "/opt/smolvm/kernel.py"
	kernelWorkerPath        = "/opt/smolvm/worker.js" // beside kernelPath: kernel.py looks there
	// kernelStartTimeout bounds the wait for the kernel to listen.
	kernelStartTimeout = 15 * time.Second
)

// withKernel starts the code interpreter in sb, a new sandbox of the
// code interpreter's template, and removes sb if it cannot.
func (h *Handler) withKernel(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	if err := h.startKernel(ctx, sb.ID); err != nil {
		h.m.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return nil, err
	}
	return sb, nil
}

// ensureKernel starts the code interpreter in sandbox id, restored from a
// checkpoint, if the sandbox had one (its script is there) that does not
// listen. A sandbox that never had one is left alone.
func (h *Handler) ensureKernel(ctx context.Context, id string) error {
	c, err := h.m.DialPort(ctx, id, kernelPort)
	if err == nil {
		c.Close()
		return nil
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		return fmt.Errorf("code interpreter: %w", err)
	}
	exit, err := h.m.Exec(ctx, id, sandbox.Process{Args: []string{"test", "-f", kernelPath}}, sandbox.Stdio{})
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	if exit.Code != 0 {
		return nil
	}
	return h.startKernel(ctx, id)
}

// startKernel starts the code interpreter's server in sandbox id and
// returns once it listens.
func (h *Handler) startKernel(ctx context.Context, id string) error {
	for path, data := range map[string][]byte{kernelPath: kernelScript, kernelWorkerPath: kernelWorkerJS} {
		if err := h.m.WriteFile(ctx, id, path, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("code interpreter: %w", err)
		}
	}
	start := sandbox.Process{Args: []string{"sh", "-c", fmt.Sprintf("python3 %s %d >/tmp/smolvm-kernel.log 2>&1 &", kernelPath, kernelPort)}}
	exit, err := h.m.Exec(ctx, id, start, sandbox.Stdio{})
	if err == nil && exit.Code != 0 {
		err = fmt.Errorf("exit %d %s", exit.Code, exit.Error)
	}
	if err != nil {
		return fmt.Errorf("code interpreter: start: %w", err)
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
			return fmt.Errorf("code interpreter: not listening on %d after %s (python3 in the image? see /tmp/smolvm-kernel.log): %w", kernelPort, kernelStartTimeout, err)
		case <-time.After(delay):
		}
	}
}
