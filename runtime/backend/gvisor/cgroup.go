package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroupV2 reports whether the host uses the unified hierarchy only.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroupFile returns the path of a cgroup control file for a sandbox,
// for v1 (controller directories) or v2 (one unified directory).
func cgroupFile(id, controller, file string) string {
	if cgroupV2() {
		return filepath.Join(cgroupRoot, cgroupPath(id), file)
	}
	return filepath.Join(cgroupRoot, controller, cgroupPath(id), file)
}

func readInt(path string) (int64, error) {
	p, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(p)), 10, 64)
}

// readKey reads "key value" lines, as in memory.stat or memory.events.
func readKey(path, key string) int64 {
	p, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(p), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Stats implements backend.Backend, reading the sandbox's host cgroup.
func (b *Backend) Stats(ctx context.Context, s *backend.Spec) (*sandbox.Stats, error) {
	st, err := b.State(ctx, s)
	if err != nil {
		return nil, err
	}
	out := &sandbox.Stats{ProcessesAlive: st == backend.StatusRunning || st == backend.StatusPaused}
	out.OOMKills = oomKills(s.ID)
	// A created sandbox runs nothing yet, but its sentry and gofer hold
	// memory: a pool's restore targets count against its budget.
	if st != backend.StatusRunning && st != backend.StatusPaused && st != backend.StatusCreated {
		return out, nil
	}
	if cgroupV2() {
		out.MemoryBytes, _ = readInt(cgroupFile(s.ID, "", "memory.current"))
		stat := cgroupFile(s.ID, "", "memory.stat")
		out.ResidentBytes = readKey(stat, "anon") + readKey(stat, "shmem")
		out.MemoryLimit, _ = readInt(cgroupFile(s.ID, "", "memory.max"))
		out.CPUNanos = readKey(cgroupFile(s.ID, "", "cpu.stat"), "usage_usec") * 1000
		out.Pids, _ = readInt(cgroupFile(s.ID, "", "pids.current"))
		return out, nil
	}
	out.MemoryBytes, _ = readInt(cgroupFile(s.ID, "memory", "memory.usage_in_bytes"))
	stat := cgroupFile(s.ID, "memory", "memory.stat")
	out.ResidentBytes = readKey(stat, "rss") + readKey(stat, "shmem")
	out.MemoryLimit, _ = readInt(cgroupFile(s.ID, "memory", "memory.limit_in_bytes"))
	out.CPUNanos, _ = readInt(cgroupFile(s.ID, "cpuacct", "cpuacct.usage"))
	out.Pids, _ = readInt(cgroupFile(s.ID, "pids", "pids.current"))
	return out, nil
}

// oomKills counts OOM kills in the sandbox's memory cgroup. It stays
// readable after the sandbox died until the cgroup is removed.
func oomKills(id string) int64 {
	if cgroupV2() {
		return readKey(cgroupFile(id, "", "memory.events"), "oom_kill")
	}
	return readKey(cgroupFile(id, "memory", "memory.oom_control"), "oom_kill")
}

// OOMKilled reports whether the kernel's OOM killer has killed anything in
// the sandbox since it was created.
func (b *Backend) OOMKilled(s *backend.Spec) bool { return oomKills(s.ID) > 0 }

// cpuPeriod is the CFS period for CPU limits, in microseconds.
const cpuPeriod = 100000

// limitCPU caps the sandbox at s.Limits.CPUs cores. It runs after boot, and
// lets an idle sandbox bank up to one period of unused quota (CFS burst), so
// a short exec in a quiet sandbox is not throttled mid-way: the limit bounds
// sustained use, which is what it is for.
func limitCPU(s *backend.Spec) error {
	if s.Limits.CPUs <= 0 {
		return nil
	}
	quota := int64(s.Limits.CPUs * cpuPeriod)
	if cgroupV2() {
		f := cgroupFile(s.ID, "", "cpu.max")
		if err := os.WriteFile(f, []byte(fmt.Sprintf("%d %d", quota, cpuPeriod)), 0); err != nil {
			return fmt.Errorf("cpu limit: %w", err)
		}
		os.WriteFile(cgroupFile(s.ID, "", "cpu.max.burst"), []byte(strconv.FormatInt(quota, 10)), 0)
		return nil
	}
	writes := []struct{ file, val string }{
		{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
		{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)},
	}
	for _, w := range writes {
		if err := os.WriteFile(cgroupFile(s.ID, "cpu", w.file), []byte(w.val), 0); err != nil {
			return fmt.Errorf("cpu limit: %s: %w", w.file, err)
		}
	}
	// Burst needs a 5.14+ kernel; without it the quota still holds.
	os.WriteFile(cgroupFile(s.ID, "cpu", "cpu.cfs_burst_us"), []byte(strconv.FormatInt(quota, 10)), 0)
	return nil
}

// cgroupParents are the directories under which sandboxes' cgroups live:
// the unified hierarchy's under v2, and under v1 one per mounted hierarchy
// (a hybrid host's cgroup2 mount and named ones included: runsc may make
// a cgroup in each).
func cgroupParents() []string {
	if cgroupV2() {
		return []string{filepath.Join(cgroupRoot, cgroupParent)}
	}
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var parents []string
	for _, e := range entries {
		parents = append(parents, filepath.Join(cgroupRoot, e.Name(), cgroupParent))
	}
	return parents
}

// Bounds of removeCgroups' wait for a killed sandbox's tasks to leave.
const (
	cgroupDrain    = 2 * time.Second
	cgroupFirstTry = 5 * time.Millisecond
	cgroupMaxPause = 200 * time.Millisecond
)

// removeCgroups removes the sandbox's cgroups once its killed tasks have
// left them. rmdir fails with EBUSY until then, and the tasks of a create
// cut short die only at killStragglers' SIGKILL, just before: a single
// rmdir left empty directories behind for 0.8% of a hostile run's
// removes, and for half of the cut-short creates of TestCgroupChurn. It
// tries again with backoff for up to cgroupDrain.
func removeCgroups(ctx context.Context, id string) error {
	deadline := time.Now().Add(cgroupDrain)
	pause := cgroupFirstTry
	for {
		err := removeCgroupsOnce(id)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, cgroupMaxPause)
	}
}

// removeCgroupsOnce removes the sandbox's cgroup in every hierarchy.
func removeCgroupsOnce(id string) error {
	var errs []error
	for _, parent := range cgroupParents() {
		errs = append(errs, rmdirTree(filepath.Join(parent, id)))
	}
	return errors.Join(errs...)
}

// rmdirTree removes the cgroup dir and every cgroup below it, deepest
// first: a cgroup is removed by rmdir alone (its control files go with
// it) and only once it has no tasks and no children.
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// Sweep implements backend.Backend: it removes the cgroups of sandboxes
// gone names. A delete that outlived its wait on a stuck task, or a smolvm
// killed mid-delete, leaves them. The cgroup parent is shared by every
// smolvm on the host, so a cgroup stays while a live process names its ID
// (runsc names it from the first moment of a create or restart, before
// any task joins the cgroup) or a task is in it (rmdir refuses).
func (b *Backend) Sweep(ctx context.Context, gone func(id string) bool) ([]string, error) {
	named := namedWords()
	var removed []string
	var errs []error
	for _, id := range cgroupIDs() {
		if !gone(id) || named[id] {
			continue
		}
		err := removeCgroupsOnce(id)
		switch {
		case errors.Is(err, unix.EBUSY):
			// Tasks still in it: not a leftover (yet).
		case err != nil:
			errs = append(errs, fmt.Errorf("cgroup of %s: %w", id, err))
		default:
			removed = append(removed, "leftover cgroup "+id)
		}
	}
	return removed, errors.Join(errs...)
}

// cgroupIDs lists the sandbox IDs that have a cgroup in any hierarchy.
func cgroupIDs() []string {
	seen := map[string]bool{}
	var ids []string
	for _, parent := range cgroupParents() {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}
