package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// errUnsupported marks an operation this build's sandbox manager lacks.
var errUnsupported = errors.New("not supported by this smolvm build")

// extend gives sb ttl more time to live from now, as E2B's setTimeout does.
func (h *Handler) extend(r *http.Request, sb *sandbox.Sandbox, ttl time.Duration) error {
	return fmt.Errorf("set timeout of %s: %w", sb.ID, errUnsupported)
}

func (h *Handler) resume(r *http.Request, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	return nil, fmt.Errorf("resume %s: %w", sb.ID, errUnsupported)
}

func (h *Handler) pauseSandbox(r *http.Request, sb *sandbox.Sandbox) error {
	return fmt.Errorf("pause %s: %w", sb.ID, errUnsupported)
}

func (h *Handler) forkSandbox(r *http.Request, sb *sandbox.Sandbox, n int) ([]*sandbox.Sandbox, error) {
	return nil, fmt.Errorf("fork %s: %w", sb.ID, errUnsupported)
}
