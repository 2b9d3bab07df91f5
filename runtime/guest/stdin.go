package guest

import (
	"io"
	"sync"
)

// maxPendingStdin bounds the stdin an exec holds that its command has not
// read yet. Up to it the agent keeps reading the host's frames, so a
// signal or resize sent after input the command ignores still arrives (a
// write to a full pipe would stall the frame loop, and a kill with it);
// past it the agent stops reading, which holds the host back. One E2B
// sendStdin message (at most 4 MiB) fits.
const maxPendingStdin = 4 << 20

// stdinQueue hands a command its stdin from a goroutine of its own, so the
// frame loop never waits on the command.
type stdinQueue struct {
	w   io.WriteCloser
	eof func() // what stdin's end is: close the pipe, or ^D to a terminal

	mu      sync.Mutex
	cond    *sync.Cond
	chunks  [][]byte
	size    int
	ended   bool // the client's EOF is queued
	stopped bool // the exec is over: drop everything
}

func newStdinQueue(w io.WriteCloser, eof func()) *stdinQueue {
	q := &stdinQueue{w: w, eof: eof}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

// put queues b (which it keeps), waiting while maxPendingStdin bytes are
// pending.
func (q *stdinQueue) put(b []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.size >= maxPendingStdin && !q.stopped {
		q.cond.Wait()
	}
	if q.stopped || q.ended {
		return
	}
	q.chunks = append(q.chunks, b)
	q.size += len(b)
	q.cond.Broadcast()
}

// end queues stdin's end, after what is pending.
func (q *stdinQueue) end() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ended = true
	q.cond.Broadcast()
}

// stop drops what is pending and ends the writer once its current write
// returns (the caller closes the pipe, which ends a write in progress).
func (q *stdinQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.chunks, q.size = nil, 0
	q.cond.Broadcast()
}

func (q *stdinQueue) run() {
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.ended && !q.stopped {
			q.cond.Wait()
		}
		if q.stopped {
			q.mu.Unlock()
			return
		}
		if len(q.chunks) == 0 { // ended, all written
			q.mu.Unlock()
			q.eof()
			return
		}
		b := q.chunks[0]
		q.chunks = q.chunks[1:]
		q.mu.Unlock()
		_, err := q.w.Write(b)
		q.mu.Lock()
		q.size -= len(b)
		q.cond.Broadcast()
		q.mu.Unlock()
		if err != nil {
			q.stop() // the command's stdin is gone: later input goes nowhere
			return
		}
	}
}
