package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// removeCgroups removes what runsc may have left. Directories of a cgroup
// can only be removed with rmdir, and only when empty of processes.
func removeCgroups(id string) {
	if cgroupV2() {
		os.Remove(filepath.Join(cgroupRoot, cgroupPath(id)))
		return
	}
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		os.Remove(filepath.Join(cgroupRoot, e.Name(), cgroupPath(id)))
	}
}
