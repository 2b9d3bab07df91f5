// Package proc tells whether the process that owns a durable record
// (a run in the state database) still runs.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Owner names a process: its pid and its start time in clock ticks since
// boot, so that a pid the kernel has since given to another process does
// not pass for the owner.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"pid_start,omitempty"`
}

// Self is the calling process.
func Self() Owner {
	pid := os.Getpid()
	return Owner{PID: pid, Start: startTime(pid)}
}

// Alive reports whether the owner still runs. An Owner without a start
// time (an older record) is alive while its pid exists.
func (o Owner) Alive() bool {
	if o.PID <= 0 {
		return false
	}
	if o.PID == os.Getpid() {
		return true
	}
	st := startTime(o.PID)
	if st == 0 {
		return false
	}
	return o.Start == 0 || o.Start == st
}

// startTime is field 22 of /proc/PID/stat, or 0 if there is no such
// process.
func startTime(pid int) uint64 {
	p, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from the last ')'.
	i := bytes.LastIndexByte(p, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(p[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return v
}
