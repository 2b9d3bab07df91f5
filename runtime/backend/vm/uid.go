package vm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Every QEMU drops root for a uid of its sandbox's own (-runas UID:GID)
// once it has opened its launch files: a booted one its RAM, disks,
// console, sockets and /dev/kvm; a pre-launched one (every copy's,
// standby.go) all but its RAM and writable disk, which it is handed at
// the restore. The relay runs as that uid from its start. No file but
// the run dir (and a copy's overlay) belongs to that uid, and the
// sandbox's directory is root's (0700; 0710 to the uid for a copy, see
// diskNode), so a QEMU its guest broke into reaches nothing but what it
// holds open and its own disk chain, and cannot signal another
// sandbox's QEMU. Each uid
// is held by a file in <cache>/uids naming the sandbox's directory, so
// two sandboxes never share one; a sandbox whose directory is gone (a
// crash) gives its uid back to the next one hashed onto it.
const (
	uidBase  = 1 << 30
	uidCount = 1 << 20
	// uidProbes bounds the search past a taken uid.
	uidProbes = 64
)

// sandboxUID returns the uid of the sandbox in dir, taking one if it has
// none yet.
func sandboxUID(cache, dir string) (int, error) {
	mine := filepath.Join(dir, "uid")
	if p, err := os.ReadFile(mine); err == nil {
		if uid, err := strconv.Atoi(strings.TrimSpace(string(p))); err == nil {
			return uid, nil
		}
	}
	uids := filepath.Join(cache, "uids")
	if err := os.MkdirAll(uids, 0o700); err != nil {
		return 0, err
	}
	h := fnv.New32a()
	h.Write([]byte(dir))
	for i := range uint32(uidProbes) {
		uid := uidBase + int((h.Sum32()+i)%uidCount)
		held := filepath.Join(uids, strconv.Itoa(uid))
		ok, err := holdUID(held, dir)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if err := os.WriteFile(mine, []byte(strconv.Itoa(uid)), 0o600); err != nil {
			os.Remove(held)
			return 0, err
		}
		return uid, nil
	}
	return 0, fmt.Errorf("no free uid for QEMU among %d tried in %s", uidProbes, uids)
}

// holdUID takes the uid whose file is held for dir, reporting false if
// another live sandbox holds it.
func holdUID(held, dir string) (bool, error) {
	for range 2 {
		f, err := os.OpenFile(held, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(dir)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err == nil, err
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, err
		}
		owner, err := os.ReadFile(held)
		if err != nil {
			continue // released meanwhile
		}
		if string(owner) == dir {
			return true, nil
		}
		if _, err := os.Stat(string(owner)); !errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		os.Remove(held) // its sandbox is gone
	}
	return false, nil
}

// releaseUID gives back the uid of the sandbox in dir, if it holds one.
func releaseUID(cache, dir string) {
	p, err := os.ReadFile(filepath.Join(dir, "uid"))
	if err != nil {
		return
	}
	held := filepath.Join(cache, "uids", strings.TrimSpace(string(p)))
	if owner, err := os.ReadFile(held); err == nil && string(owner) == dir {
		os.Remove(held)
	}
}
