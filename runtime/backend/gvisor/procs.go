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
		if worksOn(pid, root) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// worksOn reports whether pid is a runsc process working on the runsc
// root dir root, by its --root argument.
func worksOn(pid int, root string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	want := []byte("--root=" + root)
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if bytes.Equal(arg, want) {
			return true
		}
	}
	return false
}

// liveOn reports whether pid, read from the state file under the runsc
// root dir root, is still that runsc process and not a zombie. The pid
// may have been reused since the sandbox died, by any process: trusting
// it made a follower of the main log wait forever and a delete kill a
// stranger.
func liveOn(pid int, root string) bool {
	return pid > 0 && processAlive(pid) && worksOn(pid, root)
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	p, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	i := bytes.LastIndexByte(p, ')')
	return i > 0 && i+2 < len(p) && p[i+2] != 'Z' && p[i+2] != 'X'
}
