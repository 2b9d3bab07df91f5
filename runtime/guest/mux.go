package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/internal/splice"
)

// A microVM has one serial port to its agent, and the host opens a
// connection per operation: the mux carries many streams over that port.
// Frames are a 1-byte type, a 4-byte stream ID and a 4-byte length, both
// big-endian, then the payload. The host opens streams; either side
// closes one, for both directions.
const (
	muxOpen  = 'o' // host → guest, empty
	muxData  = 'd'
	muxClose = 'c'
	// muxFile carries a mirrored run-dir file (see mirror.go); muxSync
	// asks the other side to answer muxSynced once it has applied every
	// frame before it. Their stream ID is 0, or the sync's token.
	muxFile   = 'f'
	muxSync   = 's'
	muxSynced = 'S'
)

// muxFrame bounds a mux frame's payload.
const muxFrame = 64 << 10

// muxBuffer bounds what a stream holds unread. Past it the mux stops
// reading the port until the stream's reader catches up: every stream
// waits behind a slow one, but memory stays bounded.
const muxBuffer = 4 << 20

// Mux multiplexes streams over one byte stream (a serial port).
type Mux struct {
	raw io.Reader
	r   *bufio.Reader

	wmu sync.Mutex
	w   io.Writer

	mu      sync.Mutex
	streams map[uint32]*muxStream
	next    uint32
	accept  chan *muxStream // nil while nothing listens
	err     error           // set once the underlying stream failed
	syncs   map[uint32]chan struct{}

	// filesDir receives mirrored files named in filesIn.
	filesDir string
	filesIn  []string
}

// ReceiveFiles makes the mux write the mirrored files named in names into
// dir; others are refused. It must be called before Run.
func (m *Mux) ReceiveFiles(dir string, names []string) {
	m.filesDir, m.filesIn = dir, names
}

// sync waits until the other side has applied every frame sent so far,
// or timeout.
func (m *Mux) sync(timeout time.Duration) bool {
	m.mu.Lock()
	m.next++
	token, done := m.next, make(chan struct{})
	if m.syncs == nil {
		m.syncs = map[uint32]chan struct{}{}
	}
	m.syncs[token] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.syncs, token)
		m.mu.Unlock()
	}()
	if m.write(muxSync, token, nil) != nil {
		return false
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// NewMux returns a mux over rw; Run must be called to read it.
func NewMux(rw io.ReadWriter) *Mux {
	return &Mux{raw: rw, r: bufio.NewReaderSize(rw, muxFrame+9), w: rw, streams: map[uint32]*muxStream{}}
}

// RunPort runs the mux over a serial port until ctx ends. The port reads
// end of file while no host is connected (and whenever the host side is
// replaced, as after a restore), so it starts over, with no streams,
// until the host is back.
func (m *Mux) RunPort(ctx context.Context) {
	for ctx.Err() == nil {
		m.Run()
		m.mu.Lock()
		m.err = nil
		m.mu.Unlock()
		m.r.Reset(m.raw)
		time.Sleep(10 * time.Millisecond)
	}
}

// Run reads frames until the underlying stream fails, and returns why
// (never nil). Every open stream is closed then.
func (m *Mux) Run() error {
	err := m.read()
	m.mu.Lock()
	m.err = err
	streams := m.streams
	m.streams = map[uint32]*muxStream{}
	m.mu.Unlock()
	for _, s := range streams {
		s.closeRemote()
	}
	return err
}

func (m *Mux) read() error {
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(m.r, hdr[:]); err != nil {
			return err
		}
		typ, id, n := hdr[0], binary.BigEndian.Uint32(hdr[1:5]), binary.BigEndian.Uint32(hdr[5:])
		if n > muxFrame {
			return fmt.Errorf("mux frame of %d bytes exceeds %d", n, muxFrame)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(m.r, p); err != nil {
			return err
		}
		switch typ {
		case muxOpen:
			m.opened(id)
		case muxData:
			m.mu.Lock()
			s := m.streams[id]
			m.mu.Unlock()
			if s != nil {
				s.push(p)
			}
		case muxClose:
			m.mu.Lock()
			s := m.streams[id]
			delete(m.streams, id)
			m.mu.Unlock()
			if s != nil {
				s.closeRemote()
			}
		case muxFile:
			if m.filesDir != "" {
				if err := handleFile(m.filesDir, m.filesIn, p); err != nil {
					fmt.Fprintln(os.Stderr, "mux:", err)
				}
			}
		case muxSync:
			m.write(muxSynced, id, nil)
		case muxSynced:
			m.mu.Lock()
			if c := m.syncs[id]; c != nil {
				close(c)
				delete(m.syncs, id)
			}
			m.mu.Unlock()
		default:
			return fmt.Errorf("mux frame of unknown type %q", typ)
		}
	}
}

// opened takes a stream the other side opened, or refuses it when
// nothing listens.
func (m *Mux) opened(id uint32) {
	m.mu.Lock()
	accept := m.accept
	var s *muxStream
	if accept != nil {
		s = newMuxStream(m, id)
		m.streams[id] = s
	}
	m.mu.Unlock()
	if s == nil {
		m.write(muxClose, id, nil)
		return
	}
	select {
	case accept <- s:
	default:
		// The listener is not keeping up: refuse rather than stall
		// every other stream.
		m.forget(id)
		m.write(muxClose, id, nil)
	}
}

func (m *Mux) forget(id uint32) {
	m.mu.Lock()
	delete(m.streams, id)
	m.mu.Unlock()
}

func (m *Mux) write(typ byte, id uint32, p []byte) error {
	var hdr [9]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:5], id)
	binary.BigEndian.PutUint32(hdr[5:], uint32(len(p)))
	buf := append(hdr[:], p...)
	m.wmu.Lock()
	defer m.wmu.Unlock()
	_, err := m.w.Write(buf)
	return err
}

// Dial opens a stream to the other side.
func (m *Mux) Dial() (net.Conn, error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, m.err
	}
	m.next++
	s := newMuxStream(m, m.next)
	m.streams[s.id] = s
	m.mu.Unlock()
	if err := m.write(muxOpen, s.id, nil); err != nil {
		m.forget(s.id)
		return nil, err
	}
	return s, nil
}

// Listen accepts the streams the other side opens until the listener is
// closed; streams opened while nothing listens are refused.
func (m *Mux) Listen() net.Listener {
	l := &muxListener{m: m, c: make(chan *muxStream, 64), done: make(chan struct{})}
	m.mu.Lock()
	m.accept = l.c
	m.mu.Unlock()
	return l
}

type muxListener struct {
	m    *Mux
	c    chan *muxStream
	once sync.Once
	done chan struct{}
}

func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case s := <-l.c:
		return s, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *muxListener) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		if l.m.accept == l.c {
			l.m.accept = nil
		}
		l.m.mu.Unlock()
		close(l.done)
		// Streams accepted by the mux but not by us are refused.
		for {
			select {
			case s := <-l.c:
				s.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *muxListener) Addr() net.Addr { return muxAddr{} }

type muxAddr struct{}

func (muxAddr) Network() string { return "mux" }
func (muxAddr) String() string  { return "mux" }

// muxStream is one stream: a net.Conn whose reads come from its buffer.
type muxStream struct {
	m  *Mux
	id uint32

	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	remote bool // the other side closed
	local  bool // we closed
}

func newMuxStream(m *Mux, id uint32) *muxStream {
	s := &muxStream{m: m, id: id}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// push queues p for reading, waiting while the stream holds too much.
func (s *muxStream) push(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.buf) >= muxBuffer && !s.local {
		s.cond.Wait()
	}
	if !s.local {
		s.buf = append(s.buf, p...)
		s.cond.Broadcast()
	}
}

func (s *muxStream) closeRemote() {
	s.mu.Lock()
	s.remote = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *muxStream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.buf) == 0 && !s.remote && !s.local {
		s.cond.Wait()
	}
	if s.local {
		return 0, net.ErrClosed
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil
	}
	s.cond.Broadcast()
	return n, nil
}

func (s *muxStream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		s.mu.Lock()
		closed := s.local || s.remote
		s.mu.Unlock()
		if closed {
			return written, net.ErrClosed
		}
		n := min(len(p), muxFrame)
		if err := s.m.write(muxData, s.id, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func (s *muxStream) Close() error {
	s.mu.Lock()
	if s.local {
		s.mu.Unlock()
		return nil
	}
	s.local = true
	remote := s.remote
	s.buf = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	s.m.forget(s.id)
	if !remote {
		s.m.write(muxClose, s.id, nil)
	}
	return nil
}

func (s *muxStream) LocalAddr() net.Addr                { return muxAddr{} }
func (s *muxStream) RemoteAddr() net.Addr               { return muxAddr{} }
func (s *muxStream) SetDeadline(t time.Time) error      { return errNoDeadline }
func (s *muxStream) SetReadDeadline(t time.Time) error  { return errNoDeadline }
func (s *muxStream) SetWriteDeadline(t time.Time) error { return errNoDeadline }

var errNoDeadline = errors.New("mux streams have no deadlines")

// Relay serves ln by opening a stream over m for each connection, and
// copying both ways until either side closes. It returns when ln fails.
func Relay(m *Mux, ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		s, err := m.Dial()
		if err != nil {
			c.Close()
			return err
		}
		go splice.Conns(c, c, s)
	}
}

// SerialPort opens the virtio-serial port named name (its
// /sys/class/virtio-ports/*/name), read-write, once: no udev makes the
// /dev/virtio-ports links in a microVM.
func SerialPort(name string) (*os.File, error) {
	ports, _ := os.ReadDir("/sys/class/virtio-ports")
	for _, p := range ports {
		n, err := os.ReadFile("/sys/class/virtio-ports/" + p.Name() + "/name")
		if err == nil && string(trimNL(n)) == name {
			return os.OpenFile("/dev/"+p.Name(), os.O_RDWR, 0)
		}
	}
	return nil, fmt.Errorf("no virtio-serial port named %q", name)
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == 0) {
		p = p[:len(p)-1]
	}
	return p
}

// RelayFiles is the host side of a microVM's agent port, run as a
// process of its own beside QEMU so that it outlives the smolvm command
// that started the sandbox. It mirrors the agent's run-dir files into
// runDir, and sends the agent the identity the host leaves there (see
// mirror.go). serial and agent are listening Unix sockets:
// QEMU's virtio-serial chardev connects to serial once, and every host
// client of the agent connects to agent and gets a stream of its own.
// runDir is an open directory: the relay runs as its sandbox's uid,
// which may not reach it by its path. It returns once QEMU's connection
// ends; agent's socket file is left to the host, whose directory it is.
func RelayFiles(serial, agent, runDir *os.File) error {
	// Its QEMU runs as the same uid: keep it from tracing the relay.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("relay: not dumpable: %w", err)
	}
	// The open directory, by a path that needs no search of its parents.
	dir := fmt.Sprintf("/proc/self/fd/%d", runDir.Fd())
	sl, err := net.FileListener(serial)
	if err != nil {
		return fmt.Errorf("serial listener: %w", err)
	}
	serial.Close()
	al, err := net.FileListener(agent)
	if err != nil {
		return fmt.Errorf("agent listener: %w", err)
	}
	agent.Close()
	defer al.Close()
	qemu, err := sl.Accept()
	sl.Close()
	if err != nil {
		return fmt.Errorf("accept QEMU: %w", err)
	}
	defer qemu.Close()
	m := NewMux(qemu)
	m.ReceiveFiles(dir, mirroredOut)
	go Relay(m, al)
	if err := m.sendResume(dir); err != nil {
		return err
	}
	// Run returns only when the stream fails; EOF is QEMU closing it.
	if err := m.Run(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// sendResume sends the agent each identity the host leaves in runDir
// (resume.json), removing it from there once sent.
func (m *Mux) sendResume(runDir string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("relay: inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, runDir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return fmt.Errorf("relay: watch %s: %w", runDir, err)
	}
	send := func() {
		for _, name := range mirroredIn {
			if _, err := m.sendFile(runDir, name, 0, true); err == nil {
				os.Remove(filepath.Join(runDir, name))
			}
		}
	}
	send() // left before the relay started
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := unix.Read(fd, buf); err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			send()
		}
	}()
	return nil
}
