package gvisor

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// killStragglers kills every runsc process working on the runsc root dir,
// found by its --root argument. A runsc killed half-way through a create
// leaves a gofer and sandbox that no state file records yet.
func killStragglers(root string) {
	for _, pid := range others() {
		if worksOn(pid, root) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// others lists the pids of every process but this one.
func others() []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// args reads pid's command line; a zombie's is empty.
func args(pid int) []string {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(string(cmdline), "\x00")
}

// worksOn reports whether pid is a runsc process working on the runsc
// root dir root, by its --root argument.
func worksOn(pid int, root string) bool {
	return slices.Contains(args(pid), "--root="+root)
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

// namedWords returns every argument of every other live process's
// command line, and every path component of those arguments. runsc names
// its sandbox's ID both ways (the container ID; --root and --bundle under
// the sandbox's directory, named by the ID), from the first moment of a
// create.
func namedWords() map[string]bool {
	words := map[string]bool{}
	for _, pid := range others() {
		for _, arg := range args(pid) {
			words[arg] = true
			for _, part := range strings.FieldsFunc(arg, func(r rune) bool { return r == '/' || r == '=' }) {
				words[part] = true
			}
		}
	}
	return words
}
