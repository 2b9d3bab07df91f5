// Package ramfd hands a QEMU that has dropped root its checkpoint's RAM
// file, read-only.
//
// A restored copy maps the checkpoint's RAM file copy-on-write
// (memory-backend-file, share=off), which needs only read access. But
// QEMU 7.2 opens that file read-write all the same (open(path, O_RDWR);
// readonly=on maps the guest's RAM read-only too, and the rom= split came
// in QEMU 8.2), and a pre-launched QEMU opens it after dropping root.
// Granting its uid write access would let every copy write the pages all
// copies of that checkpoint share. So the QEMU is started through Exec,
// which installs a seccomp filter that turns each openat(…, O_RDWR) (the
// exact flags of that open; QEMU's opens through qemu_open add
// O_CLOEXEC) into a notification to a supervisor. The QEMU keeps the
// filter's listener. Such an open waits until a supervisor answers it, so
// one must be there whenever QEMU makes one: QEMU 7.2 makes one more, of
// /dev/null, once, as it opens its first disk at its start (its probe for
// open file description locks), which LetThrough answers. At the restore
// the backend answers the RAM file's open with a file it opened
// read-only (Answer): the kernel installs it in QEMU as the open's
// result, and QEMU maps it privately.
package ramfd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data, which a filter reads.
const (
	dataNr    = 0
	dataArch  = 4
	dataArgs2 = 16 + 2*8 // openat's flags; the low half on little-endian
)

// filter notifies openat with flags O_RDWR exactly, on x86-64 (QEMU's
// microvm machine is x86 only), and allows everything else: QEMU's own
// seccomp filter (-sandbox) does the refusing.
var filter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: dataArch},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jf: 5, K: unix.AUDIT_ARCH_X86_64},
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: dataNr},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jf: 3, K: unix.SYS_OPENAT},
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: dataArgs2},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jf: 1, K: unix.O_RDWR},
	{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_USER_NOTIF},
	{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
}

// Exec replaces this process with argv (argv[0] a path), under the
// filter, its listener left open for Take. It returns only on failure.
func Exec(argv []string) error {
	// The filter is the calling thread's, which must be the one that
	// execs: the new program starts with that thread alone.
	runtime.LockOSThread()
	// Needed to install a filter without CAP_SYS_ADMIN, and harmless to
	// QEMU, which never execs (-sandbox spawn=deny) and drops root by
	// set*id calls, which no_new_privs leaves alone.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp filter with a listener (Linux 5.14 or later): %w", errno)
	}
	// Kept across exec, so that the listener lives as long as the program.
	if _, err := unix.FcntlInt(fd, unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	return fmt.Errorf("exec %s: %w", argv[0], syscall.Exec(argv[0], argv, os.Environ()))
}

// Listener is a supervisor's copy of a process's listener.
type Listener struct {
	f *os.File
}

// listenerLink is what /proc/PID/fd/N reads for a listener.
const listenerLink = "anon_inode:seccomp notify"

// Take copies the listener of process pid, started through Exec,
// waiting (until ctx ends) for Exec to have made it.
func Take(ctx context.Context, pid int) (*Listener, error) {
	for {
		n, err := listenerFD(pid)
		if err != nil {
			return nil, err
		}
		if n >= 0 {
			return take(pid, n)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("process %d has no seccomp listener (not started through ramfd.Exec?): %w", pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Started reports whether process pid holds a listener: whether it was
// started through Exec (or is a supervisor holding a copy).
func Started(pid int) bool {
	n, err := listenerFD(pid)
	return err == nil && n >= 0
}

// listenerFD is the number of process pid's listener, or -1.
func listenerFD(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("listener of %d: %w", pid, err)
	}
	for _, e := range fds {
		if link, _ := os.Readlink(filepath.Join(dir, e.Name())); link == listenerLink {
			return strconv.Atoi(e.Name())
		}
	}
	return -1, nil
}

// take copies file n of process pid.
func take(pid, n int) (*Listener, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, n, 0)
	if err != nil {
		return nil, fmt.Errorf("listener of %d: %w", pid, err)
	}
	return &Listener{os.NewFile(uintptr(fd), "seccomp-notify")}, nil
}

// Close closes the supervisor's copy; the process keeps its own.
func (l *Listener) Close() error { return l.f.Close() }

// The kernel's struct seccomp_notif, seccomp_notif_resp and
// seccomp_notif_addfd.
type (
	notif struct {
		id    uint64
		pid   uint32
		flags uint32
		nr    int32
		arch  uint32
		ip    uint64
		args  [6]uint64
	}
	notifResp struct {
		id    uint64
		val   int64
		error int32
		flags uint32
	}
	notifAddfd struct {
		id         uint64
		flags      uint32
		srcfd      uint32
		newfd      uint32
		newfdFlags uint32
	}
)

// Answer waits for the open of path and answers it with f, which becomes
// the opening process's file; opens of other paths meanwhile proceed as
// that process. It returns once path's open is answered, or with ctx.
func (l *Listener) Answer(ctx context.Context, path string, f *os.File) error {
	return l.serve(ctx, path, f)
}

// LetThrough lets every open proceed, as the opening process, until ctx
// ends.
func (l *Listener) LetThrough(ctx context.Context) {
	l.serve(ctx, "", nil)
}

// serve answers opens of path with f (none if f is nil) and lets others
// proceed, until path's open is answered or ctx ends.
func (l *Listener) serve(ctx context.Context, path string, f *os.File) error {
	for {
		n, err := l.next(ctx)
		if err != nil {
			return err
		}
		asked, err := readPath(int(n.pid), uintptr(n.args[1]))
		// Read from the process's memory: valid only if the call still
		// waits (the process may have died meanwhile).
		if l.ioctl(unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&n.id)) != nil {
			continue
		}
		if f == nil || err != nil || asked != path {
			resp := notifResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("let %d open %q: %w", n.pid, asked, err)
			}
			continue
		}
		add := notifAddfd{id: n.id, flags: unix.SECCOMP_ADDFD_FLAG_SEND, srcfd: uint32(f.Fd())}
		if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_ADDFD, unsafe.Pointer(&add)); err != nil {
			return fmt.Errorf("hand %s to %d: %w", path, n.pid, err)
		}
		return nil
	}
}

// next waits for a notification until ctx ends.
func (l *Listener) next(ctx context.Context) (notif, error) {
	for {
		if err := ctx.Err(); err != nil {
			return notif{}, fmt.Errorf("no open to answer: %w", err)
		}
		pfd := []unix.PollFd{{Fd: int32(l.f.Fd()), Events: unix.POLLIN}}
		// In slices, so that ctx is heeded.
		if n, err := unix.Poll(pfd, 100); err != nil && !errors.Is(err, unix.EINTR) {
			return notif{}, fmt.Errorf("poll listener: %w", err)
		} else if n == 0 {
			continue
		}
		if pfd[0].Revents&unix.POLLHUP != 0 {
			return notif{}, errors.New("the supervised process ended")
		}
		var n notif
		if err := l.ioctl(unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // interrupted, or the caller gave up meanwhile
			}
			return notif{}, fmt.Errorf("receive: %w", err)
		}
		return n, nil
	}
}

func (l *Listener) ioctl(req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, l.f.Fd(), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// readPath reads the NUL-terminated path at addr in process pid.
func readPath(pid int, addr uintptr) (string, error) {
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", err
	}
	defer mem.Close()
	var path []byte
	buf := make([]byte, 256)
	for len(path) < unix.PathMax {
		n, err := mem.ReadAt(buf, int64(addr)+int64(len(path)))
		for i := range n {
			if buf[i] == 0 {
				return string(append(path, buf[:i]...)), nil
			}
		}
		path = append(path, buf[:n]...)
		if err != nil {
			return "", fmt.Errorf("path of %d's open: %w", pid, err)
		}
	}
	return "", fmt.Errorf("path of %d's open: longer than %d bytes", pid, unix.PathMax)
}
