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
// has node). Sandboxes of the template codeInterpreterTemplate
// (the SDK's default) start it at create; their interpreters live in the
// sandbox's memory, so a fork or checkpoint copies their state.

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
