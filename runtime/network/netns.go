package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// InNetNS runs fn on an OS thread inside the network namespace at path
// ("" is the caller's own). Sockets, netlink handles and /proc/sys/net
// files opened by fn belong to that namespace for good; goroutines fn
// starts do not run there.
func InNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is unlocked only if it got back to its own
		// namespace; otherwise it exits with the goroutine, so no other
		// goroutine ever runs in the wrong namespace.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", path, err)
			return
		}
		err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET)
		target.Close()
		if err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// newNetNS creates a network namespace and pins it at path with a bind
// mount, so it outlives this process.
func newNetNS(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// Unsharing changes this thread for good: it is never unlocked,
		// so it exits when the goroutine does.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		errc <- unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// delNetNS unpins the namespace at path; the kernel frees it, and its
// interfaces, once no process is in it.
func delNetNS(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Check reports whether this host can give sandboxes networks: it makes a
// throwaway namespace under dir with a veth pair and an nftables table.
func Check(dir string) error {
	path := filepath.Join(dir, fmt.Sprintf(".check-netns-%d", os.Getpid()))
	if err := newNetNS(path); err != nil {
		return err
	}
	defer delNetNS(path)
	return InNetNS(path, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "check0"}, PeerName: "check1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		conn, err := nftables.New()
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "smolvm-check"})
		if err := conn.Flush(); err != nil {
			return fmt.Errorf("nftables (inet family): %w", err)
		}
		return nil
	})
}
