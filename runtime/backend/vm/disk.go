package vm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/backend"
)

// maxImage bounds an image disk: each one is a full copy of its files.
const maxImage = 2 << 30

// defaultDisk is a sandbox's writable disk when the spec sets no size.
const defaultDisk = 2 << 30

// imageDisk returns the ext4 image of rootfs (its layers, with its
// read-only mounts copied in), building it into cache once per image and
// mounts. The disk is attached read-only; sandboxes write to their own.
func imageDisk(cache string, r backend.Rootfs) (string, error) {
	if len(r.Layers) == 0 {
		return "", errors.New("image has no layers")
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", r.ImageID)
	for _, l := range r.Layers {
		fmt.Fprintf(h, "layer %s %s\n", l.Digest, l.Dir)
	}
	for _, m := range r.Mounts {
		fmt.Fprintf(h, "mount %s %s\n", m.Source, m.Destination)
	}
	out := filepath.Join(cache, "image-"+hex.EncodeToString(h.Sum(nil)[:12])+".ext4")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	stage, err := os.MkdirTemp(cache, "stage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	root := filepath.Join(stage, "root")
	upper, work := filepath.Join(stage, "upper"), filepath.Join(stage, "work")
	for _, d := range []string{root, upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	dirs := make([]string, len(r.Layers))
	for i, l := range r.Layers {
		dirs[len(r.Layers)-1-i] = l.Dir // overlayfs lists the top first
	}
	opts := "lowerdir=" + strings.Join(dirs, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mount layers: %w", err)
	}
	defer unix.Unmount(root, unix.MNT_DETACH)
	for _, m := range r.Mounts {
		dst := filepath.Join(root, filepath.Clean("/"+m.Destination))
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		if err := unix.Mount(m.Source, dst, "", unix.MS_BIND|unix.MS_REC|unix.MS_RDONLY, ""); err != nil {
			return "", fmt.Errorf("mount %s: %w", m.Source, err)
		}
		defer unix.Unmount(dst, unix.MNT_DETACH)
	}
	var size int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil {
			if fi, err := d.Info(); err == nil {
				size += fi.Size() + 4096
			}
		}
		return nil
	})
	if size > maxImage {
		return "", fmt.Errorf("image %s is %d MiB with its mounts, over the %d MiB a VM disk image may take", r.ImageID, size>>20, maxImage>>20)
	}
	size = size + size/4 + 32<<20
	tmp := out + ".tmp" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	if err := mkfs(tmp, size, root); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, nil
}

// blankDisk returns an empty ext4 file system of size bytes (sparse),
// made once per size: each sandbox's writable disk is a qcow2 overlay of
// it, so the disk limit is the file system's size.
func blankDisk(cache string, size int64) (string, error) {
	out := filepath.Join(cache, "blank-"+strconv.FormatInt(size, 10)+".ext4")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tmp := out + ".tmp" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	if err := mkfs(tmp, size, ""); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

func mkfs(path string, size int64, from string) error {
	args := []string{"-q", "-F", "-t", "ext4", "-O", "^has_journal", "-i", "8192", "-E", "root_owner=0:0"}
	if from != "" {
		args = append(args, "-d", from)
	}
	args = append(args, path, strconv.FormatInt(size/1024, 10)+"k")
	return run("mkfs.ext4", args...)
}

func run(name string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
