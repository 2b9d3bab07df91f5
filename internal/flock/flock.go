// Package flock takes whole-file locks (flock(2)) that the kernel releases
// when their holder dies, so a crashed process never leaves one held.
package flock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Lock opens path (creating it, 0600) and waits for an exclusive lock on
// it; unlock releases it. A signal delivered to the waiting thread makes
// flock fail with EINTR, which is retried rather than reported.
func Lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Held reports whether another open file holds the lock on path right
// now; a missing or unreadable file is not held.
func Held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
}
