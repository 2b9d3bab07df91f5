package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// workloadCgroup makes the cgroup v2 group that every process the agent
// starts is born into, capped at pids tasks, and returns an open fd to it.
func workloadCgroup(root string, pids int64) (int, error) {
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		return -1, fmt.Errorf("enable pids controller: %w", err)
	}
	dir := filepath.Join(root, "workload")
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return -1, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
		return -1, fmt.Errorf("set pids.max: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}
