package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// GC removes what crashes left behind: records of creates whose process
// died, sandbox directories (with their processes, mounts and cgroups) that
// no record owns, checkpoints of crashed snapshot operations, stale lock
// files, and what backends keep outside sandbox directories (cgroups) of
// sandboxes that are stopped or removed. It returns what it removed.
func (m *Manager) GC(ctx context.Context) ([]string, error) {
	rs, err := m.listRecords(ctx, "", true)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	pools, err := m.Pools(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, p := range pools {
		live[p.Name] = true
	}
	known := map[string]bool{}
	for _, r := range rs {
		known[r.ID] = true
		if m.locked(r.ID) {
			continue
		}
		var why string
		switch {
		case r.State == sandbox.StateCreating:
			why = "orphaned sandbox "
		case r.pool != "" && !live[r.pool]:
			why = "sandbox of removed pool " + r.pool + ": "
		default:
			continue
		}
		if err := m.removeOrphan(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, why+r.Name)
	}
	dirs, err := os.ReadDir(filepath.Join(m.dataDir, "sandboxes"))
	if err != nil {
		return removed, err
	}
	for _, d := range dirs {
		id := d.Name()
		if known[id] || m.locked(id) {
			continue
		}
		// No record says which backend made it: each one deletes what
		// it would have made.
		spec := &backend.Spec{ID: id, Dir: filepath.Join(m.dataDir, "sandboxes", id)}
		var err error
		for _, be := range m.backends.All() {
			err = errors.Join(err, be.Delete(ctx, spec))
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "unowned sandbox directory "+id)
	}
	if m.snaps != nil {
		paths, err := m.snaps.GC(ctx)
		for _, p := range paths {
			removed = append(removed, "abandoned checkpoint "+p)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	locks, err := os.ReadDir(filepath.Join(m.dataDir, "locks"))
	if err != nil {
		return removed, err
	}
	for _, l := range locks {
		id := strings.TrimSuffix(l.Name(), ".lock")
		if !known[id] && !m.locked(id) {
			m.removeLock(id)
		}
	}
	swept, err := m.sweep(ctx)
	return append(removed, swept...), errors.Join(append(errs, err)...)
}

// sweep removes what backends keep outside sandbox directories (cgroups)
// of this data dir's sandboxes that are stopped or removed, and networks
// that no record owns. It reads the records again, after GC's removals; a
// create that began after that holds its lock (and has a lock file).
func (m *Manager) sweep(ctx context.Context) ([]string, error) {
	rs, err := listRecords(ctx, m.st, "", true)
	if err != nil {
		return nil, err
	}
	states := map[string]sandbox.State{}
	for _, r := range rs {
		states[r.ID] = r.State
	}
	creating := func(id string) bool {
		p, err := m.lockPath(id)
		if err == nil {
			_, err = os.Stat(p)
		}
		return err == nil && m.locked(id)
	}
	// A stopped sandbox's exit (an OOM kill included, which its cgroup
	// holds) was read when it was recorded as stopped, and a start makes
	// its cgroups again. A sandbox this data dir never had is another
	// one's, which may not have recorded its stop yet.
	gone := func(id string) bool {
		if creating(id) {
			return false
		}
		if st, ok := states[id]; ok {
			return st == sandbox.StateStopped || st == sandbox.StateExpired
		}
		return m.buried(ctx, id)
	}
	var removed []string
	var errs []error
	for _, be := range m.backends.All() {
		swept, err := be.Sweep(ctx, gone)
		removed = append(removed, swept...)
		errs = append(errs, err)
	}
	if m.net != nil {
		// Networks of records removed by GC went with them. Any other
		// network without a record is a crash's leftover.
		nets, err := m.net.GC(ctx, func(id string) bool {
			_, ok := states[id]
			return ok || creating(id)
		})
		removed = append(removed, nets...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}
