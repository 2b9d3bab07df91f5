package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// Recover finishes what crashed smolvm processes left half-done, as
// `smolvm serve` does before it serves and `smolvm gc` does: a create
// (or restore) that had done all its work but record it is completed
// (rolled forward); every other record left creating is rolled back by
// GC, which stops its processes, removes its mounts and network, and
// frees its name. Creates still running in a live process are left alone
// (they hold their lock). It returns the sandboxes it completed and what
// GC removed.
func (m *Manager) Recover(ctx context.Context) (completed, removed []string, err error) {
	rs, err := listRecords(ctx, m.st, "", true)
	if err != nil {
		return nil, nil, fmt.Errorf("recover: %w", err)
	}
	var errs []error
	for _, r := range rs {
		if r.State != sandbox.StateCreating || m.locked(r.ID) {
			continue
		}
		ok, err := m.rollForward(ctx, r.ID)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			completed = append(completed, r.Name)
		}
	}
	removed, err = m.GC(ctx)
	return completed, removed, errors.Join(append(errs, err)...)
}

// rollForward completes the crashed create of sandbox id if it had
// finished: see complete. It reports whether it did; a create it leaves
// is GC's to remove.
func (m *Manager) rollForward(ctx context.Context, id string) (bool, error) {
	unlock, err := m.lock(id)
	if err != nil {
		return false, err
	}
	defer unlock()
	r, err := m.lookup(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recover %s: %w", id, err)
	}
	if r.State != sandbox.StateCreating || !m.complete(ctx, r) {
		return false, nil
	}
	// The agent's deadline was set at boot; the record's clock starts now,
	// so give the agent the same one.
	startClock(r)
	if err := r.be.Guest(&r.spec).SetDeadline(ctx, r.spec.Deadline); err != nil {
		return false, nil
	}
	r.State, r.Reason = sandbox.StateRunning, ""
	if err := update(ctx, m.st, r); err != nil {
		return false, fmt.Errorf("recover %s: %w", r.Name, err)
	}
	m.publish("started", &r.Sandbox)
	return true, nil
}

// recoverPing bounds how long recovery waits for a crashed create's agent.
const recoverPing = 2 * time.Second

// complete reports whether a crashed create had finished all but
// recording it: its sandbox runs and its agent answers, its main command
// started, and its network, if it has one, is whole. A fork's copy never
// counts (a fork is all or nothing), nor does anything less than running.
func (m *Manager) complete(ctx context.Context, r *record) bool {
	if r.ForkedFrom != "" {
		return false
	}
	if st, err := r.be.State(ctx, &r.spec); err != nil || st != backend.StatusRunning {
		return false
	}
	if exit, err := r.be.MainExit(ctx, &r.spec); err != nil || (exit != nil && exit.NotStarted()) {
		return false
	}
	if r.Config.Network != nil && (m.net == nil || !m.net.Whole(r.ID)) {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, recoverPing)
	defer cancel()
	return r.be.Guest(&r.spec).Ping(pctx) == nil
}
