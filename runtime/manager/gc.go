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
// no record owns, checkpoints of crashed snapshot operations, and stale
// lock files. It returns what it removed.
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
	if m.net != nil {
		// Networks of records removed above went with them. Any other
		// network without a record is a crash's leftover, unless a create
		// that began after the list above holds its lock.
		rs, err := listRecords(ctx, m.st, "", true)
		if err != nil {
			return removed, errors.Join(append(errs, err)...)
		}
		alive := map[string]bool{}
		for _, r := range rs {
			alive[r.ID] = true
		}
		creating := func(id string) bool {
			p, err := m.lockPath(id)
			if err == nil {
				_, err = os.Stat(p)
			}
			return err == nil && m.locked(id)
		}
		nets, err := m.net.GC(ctx, func(id string) bool { return alive[id] || creating(id) })
		removed = append(removed, nets...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}
