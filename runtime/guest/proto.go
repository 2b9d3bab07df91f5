// Package guest is the small supervisor that runs as PID 1 inside every
// sandbox, and the host-side client that talks to it.
//
// The host reaches the agent over a stream socket (a host Unix socket under
// gVisor, a serial port under a microVM). Each operation uses its own
// connection and a simple framed protocol: one request frame from the client,
// then data frames both ways, then one exit frame from the agent. Frames are
// a 1-byte type, a 4-byte big-endian length and the payload.
package guest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// Frame types.
const (
	frameRequest  = 'R' // client → agent, JSON Request; always first
	frameStdin    = 'I' // client → agent, raw bytes
	frameStdinEOF = 'i' // client → agent, empty
	// frameStdinAbort says the client's stdin failed: an upload must be
	// abandoned, not taken as complete.
	frameStdinAbort = 'a' // client → agent, empty
	frameResize     = 'W' // client → agent, JSON Size
	frameSignal     = 'K' // client → agent, JSON int signal number
	frameStdout     = 'O' // agent → client, raw bytes
	frameStderr     = 'E' // agent → client, raw bytes
	frameExit       = 'X' // agent → client, JSON Exit; always last
	// frameOpen answers OpDial: the port is connected, and the connection
	// carries the port's raw bytes from the next byte on, both ways.
	frameOpen = 'C' // agent → client, empty
)

// maxFrame bounds a frame so that a confused or hostile peer cannot make
// the other side allocate without limit.
const maxFrame = 1 << 20

// Ops a Request can name.
const (
	OpPing = "ping"
	OpExec = "exec"
	OpPut  = "put" // extract the tar stream sent as stdin under Path
	OpGet  = "get" // stream Path as a tar archive on stdout
	// OpQuiesce drops every host connection and the listener, which a
	// checkpoint cannot save ("Cannot save endpoint with bound host
	// socket"), until the host leaves an Identity in the resume file; the
	// agent listens again after the restore.
	OpQuiesce = "quiesce"

	// File system operations on one path, for APIs that expose files
	// piecemeal (E2B's envd). Results come back as JSON on stdout.
	OpStat      = "stat"   // FileInfo of Path (not following a last symlink)
	OpList      = "list"   // []FileInfo under Path, Depth levels deep
	OpMkdir     = "mkdir"  // Path and its parents; KindExists if it exists
	OpRemove    = "remove" // Path, recursively
	OpRename    = "rename" // Path to Dest; FileInfo of Dest
	OpWriteFile = "write"  // replace Path with stdin, atomically; FileInfo
	OpReadFile  = "read"   // Path's bytes, raw, on stdout
	// OpWatch streams changes under the directory Path (every level below
	// with Recursive) as JSON WatchEvents, one per stdout frame, until the
	// client closes the connection.
	OpWatch = "watch"
	// OpDeadline moves the sandbox's deadline (Request.Deadline; nil
	// removes it), so a time to live can be extended while it runs.
	OpDeadline = "deadline"
	// OpIdentity hands a running agent a new Identity: a pooled sandbox
	// takes on the one of the sandbox it becomes.
	OpIdentity = "identity"
	// OpDial connects to TCP Port on the sandbox's loopback and splices
	// it to the connection (see Server.dialPort).
	OpDial = "dial"
	// OpSignal sends Signal to the agent itself (which takes SIGTERM and
	// SIGINT as stop) and, with All, to every process first: a backend
	// that cannot signal the sandbox's init from outside (a VM) uses it.
	OpSignal = "signal"
)

// Request is the first frame of every connection.
type Request struct {
	Op       string           `json:"op"`
	Exec     *sandbox.Process `json:"exec,omitempty"`
	Path     string           `json:"path,omitempty"`
	Identity *Identity        `json:"identity,omitempty"`
	// Dest is a rename's destination; Depth bounds a listing.
	Dest  string `json:"dest,omitempty"`
	Depth int    `json:"depth,omitempty"`
	// Recursive makes OpWatch follow every directory below Path.
	Recursive bool `json:"recursive,omitempty"`
	// Deadline is OpDeadline's new deadline.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Port is OpDial's TCP port.
	Port int `json:"port,omitempty"`
	// Signal and All are OpSignal's.
	Signal int  `json:"signal,omitempty"`
	All    bool `json:"all,omitempty"`
}

// conn frames a stream. Writes are serialized so stdout and stderr pumps can
// share it; reads belong to a single goroutine.
type conn struct {
	r  *bufio.Reader
	mu sync.Mutex
	w  io.Writer
}

func newConn(rw io.ReadWriter) *conn {
	return &conn{r: bufio.NewReaderSize(rw, 64<<10), w: rw}
}

func (c *conn) write(typ byte, p []byte) error {
	if len(p) > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(p), maxFrame)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(p)))
	c.mu.Lock()
	defer c.mu.Unlock()
	// One write per frame keeps small frames in one segment.
	buf := make([]byte, 0, 5+len(p))
	buf = append(append(buf, hdr[:]...), p...)
	_, err := c.w.Write(buf)
	return err
}

func (c *conn) writeJSON(typ byte, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.write(typ, p)
}

// writeChunks splits p into frames no larger than maxFrame.
func (c *conn) writeChunks(typ byte, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		if err := c.write(typ, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (c *conn) read() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], p, nil
}

// frameWriter adapts one frame type to an io.Writer.
type frameWriter struct {
	c   *conn
	typ byte
}

func (w frameWriter) Write(p []byte) (int, error) {
	if err := w.c.writeChunks(w.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
