package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"smolvm.dev/smolvm/backend"
)

// GC removes what crashes left behind: records of creates whose process
// died, sandbox directories (with their processes, mounts and cgroups) that
// no record owns, and stale lock files. It returns what it removed.
func (m *Manager) GC(ctx context.Context) ([]string, error) {
	rs, err := listRecords(ctx, m.st)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	known := map[string]bool{}
	for _, r := range rs {
		known[r.ID] = true
		if r.State != StateCreating || m.locked(r.ID) {
			continue
		}
		if err := m.removeRecord(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "orphaned sandbox "+r.Name)
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
		spec := &backend.Spec{ID: id, Dir: filepath.Join(m.dataDir, "sandboxes", id)}
		if err := m.be.Delete(ctx, spec); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "unowned sandbox directory "+id)
	}
	locks, err := os.ReadDir(filepath.Join(m.dataDir, "locks"))
	if err != nil {
		return removed, err
	}
	for _, l := range locks {
		id := strings.TrimSuffix(l.Name(), ".lock")
		if !known[id] && !m.locked(id) {
			os.Remove(m.lockPath(id))
		}
	}
	if m.net != nil {
		// Networks of records removed above are gone with them; any other
		// network without a record, or of a create still holding its
		// lock, is a crash's leftover only in the first case.
		rs, err := listRecords(ctx, m.st)
		if err != nil {
			return removed, errors.Join(append(errs, err)...)
		}
		alive := map[string]bool{}
		for _, r := range rs {
			alive[r.ID] = true
		}
		nets, err := m.net.GC(ctx, func(id string) bool { return alive[id] || m.locked(id) })
		removed = append(removed, nets...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}
