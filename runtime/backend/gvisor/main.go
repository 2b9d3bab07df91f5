package gvisor

import (
	"context"
	"fmt"
	"io"

	"smolvm.dev/smolvm/runtime/backend"
)

// MainExit implements backend.Backend, reading the agent's exit file.
func (b *Backend) MainExit(ctx context.Context, s *backend.Spec) (*backend.Exit, error) {
	e, err := backend.ReadExit(layout{s.Dir}.ExitFile())
	if err != nil {
		return nil, fmt.Errorf("exit of %s: %w", s.ID, err)
	}
	return e, nil
}

// MainLog implements backend.Backend.
func (b *Backend) MainLog(ctx context.Context, s *backend.Spec, follow bool) (io.ReadCloser, error) {
	return backend.MainLogReader(ctx, layout{s.Dir}.LogFile(), follow, func() (bool, error) {
		st, err := b.State(ctx, s)
		return st == backend.StatusRunning || st == backend.StatusPaused || st == backend.StatusCreated, err
	}), nil
}
