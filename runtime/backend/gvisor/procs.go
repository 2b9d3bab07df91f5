package gvisor

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// killStragglers kills every runsc process working on the runsc root dir,
// found by its --root argument. A runsc killed half-way through a create
// leaves a gofer and sandbox that no state file records yet.
func killStragglers(root string) {
	want := []byte("--root=" + root)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				unix.Kill(pid, unix.SIGKILL)
				break
			}
		}
	}
}
