package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Under a microVM the run dir cannot be shared with the host (a mounted
// 9p share blocks migration, and so checkpoints): the agent keeps it
// locally and the mux mirrors its files. Guest to host go the files the
// host reads without the agent (the main log, its exit, boot errors);
// host to guest, the identity that ends a quiesce.
var (
	mirroredOut = []string{"main.log", "main.log.1", "exit.json", "agent.err"}
	mirroredIn  = []string{"resume.json"}
)

// maxMirrored bounds a mirrored file on the receiving side: the agent
// rotates the main log at its LogLimit, so only a hostile guest gets here.
const maxMirrored = 2 * defaultLogLimit

// File operations in a muxFile frame: op, name length, name, data.
const (
	fileReplace = 'w' // the file is data (more may follow with fileAppend)
	fileAppend  = 'a'
)

// handleFile applies a mirrored file frame under dir, for names in allowed.
func handleFile(dir string, allowed []string, p []byte) error {
	if len(p) < 2 || len(p) < 2+int(p[1]) {
		return errors.New("short file frame")
	}
	op, name, data := p[0], string(p[2:2+int(p[1])]), p[2+int(p[1]):]
	if !slices.Contains(allowed, name) {
		return fmt.Errorf("file frame for %q refused", name)
	}
	path := filepath.Join(dir, name)
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if op == fileReplace {
		flags |= os.O_TRUNC
	} else if op != fileAppend {
		return fmt.Errorf("file frame of unknown op %q", op)
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()+int64(len(data)) > maxMirrored {
		return fmt.Errorf("%s: past %d bytes", name, maxMirrored)
	}
	_, err = f.Write(data)
	return err
}

// sendFile sends what of dir/name lies past off: all of it, replacing
// the other side's copy, when whole. It returns the new offset.
func (m *Mux) sendFile(dir, name string, off int64, whole bool) (int64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return off, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return off, err
	}
	if fi.Size() < off {
		whole = true // replaced or truncated
	}
	if whole {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, err
	}
	hdr := append([]byte{fileAppend, byte(len(name))}, name...)
	if whole {
		hdr[0] = fileReplace
	}
	buf := make([]byte, muxFrame-len(hdr))
	for first := true; ; first = false {
		n, err := f.Read(buf)
		if n > 0 || (first && whole) {
			if werr := m.write(muxFile, 0, append(slices.Clip(hdr), buf[:n]...)); werr != nil {
				return off, werr
			}
			hdr[0] = fileAppend
			off += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// mirror sends the agent's run-dir files to the host as they change.
type mirror struct {
	m   *Mux
	dir string

	mu  sync.Mutex
	off map[string]int64
}

// watch follows dir with inotify until the agent exits.
func (mr *mirror) watch() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("mirror: inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, mr.dir, unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
		unix.Close(fd)
		return fmt.Errorf("mirror: watch %s: %w", mr.dir, err)
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			for p := buf[:n]; len(p) >= unix.SizeofInotifyEvent; {
				mask := binary.NativeEndian.Uint32(p[4:8])
				nl := int(binary.NativeEndian.Uint32(p[12:16]))
				name := string(trimNL(p[16 : 16+nl]))
				p = p[16+nl:]
				if slices.Contains(mirroredOut, name) {
					mr.push(name, mask&(unix.IN_MOVED_TO|unix.IN_CREATE) != 0)
				}
			}
		}
	}()
	return nil
}

func (mr *mirror) push(name string, whole bool) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	off, err := mr.m.sendFile(mr.dir, name, mr.off[name], whole)
	if err == nil {
		mr.off[name] = off
	}
}

// flush sends what has not been sent and waits (briefly) until the host
// has written it: the agent exiting ends the VM.
func (mr *mirror) flush() {
	for _, n := range mirroredOut {
		mr.push(n, false)
	}
	mr.m.sync(2 * time.Second)
}
