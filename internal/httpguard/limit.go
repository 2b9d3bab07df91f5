package httpguard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
)

// Limiter bounds the requests served at once and queues a bounded number
// more, fairly between classes (a request's tenant; "" is the admin's,
// a class of its own): a class holds at most PerClass slots and its share
// of the queue, so that one tenant's requests, however slow, cannot take
// every slot or fill the queue. A freed slot goes to the longest waiting
// request whose class is under its share. Take a slot only once a request
// is authenticated: an unknown caller must never hold one.
type Limiter struct {
	slots, queue         int
	perClass, classQueue int

	mu      sync.Mutex
	running int
	waiters []*waiter // in arrival order
	classes map[string]*load
}

// load is a class's requests in flight and waiting.
type load struct{ running, waiting int }

type waiter struct {
	class   string
	ready   chan struct{} // closed when granted
	granted bool
}

// NewLimiter returns a Limiter of slots in flight and queue waiting
// (each at least 1). A class may hold perClass slots (0: half of slots;
// at most slots) and wait in the same share of the queue.
func NewLimiter(slots, queue, perClass int) *Limiter {
	slots, queue = max(slots, 1), max(queue, 1)
	if perClass <= 0 {
		perClass = slots / 2
	}
	perClass = min(max(perClass, 1), slots)
	return &Limiter{slots: slots, queue: queue, perClass: perClass, classQueue: max(queue*perClass/slots, 1), classes: map[string]*load{}}
}

// PerClass is the most slots one class may hold.
func (l *Limiter) PerClass() int { return l.perClass }

// BusyError is a request the Limiter refused: 429 (no room to wait, for
// the server or for its class) or 503 (it gave up waiting). Answer it
// with a Retry-After.
type BusyError struct {
	Status int
	Msg    string
}

func (e *BusyError) Error() string { return e.Msg }

// RefuseBusy answers err from Acquire with fail, asking the client to
// retry in a second.
func RefuseBusy(w http.ResponseWriter, err error, fail Fail) {
	status := http.StatusServiceUnavailable
	var be *BusyError
	if errors.As(err, &be) {
		status = be.Status
	}
	w.Header().Set("Retry-After", "1")
	fail(w, status, err.Error())
}

// InFlight is how many requests hold a slot.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

// Acquire takes a slot for a request of class, waiting in the queue if
// there is room in it; release gives the slot back. It fails with a
// *BusyError.
func (l *Limiter) Acquire(ctx context.Context, class string) (release func(), err error) {
	l.mu.Lock()
	c := l.class(class)
	if l.running < l.slots && c.running < l.perClass {
		l.take(c)
		l.mu.Unlock()
		return l.releaser(class), nil
	}
	switch {
	case len(l.waiters) >= l.queue:
		l.mu.Unlock()
		return nil, &BusyError{Status: http.StatusTooManyRequests, Msg: "too many requests in flight; retry"}
	case c.waiting >= l.classQueue:
		l.mu.Unlock()
		return nil, &BusyError{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf(
			"too many requests in flight for this tenant (at most %d at once and %d waiting: smolvm serve --max-in-flight-per-tenant); retry", l.perClass, l.classQueue)}
	}
	w := &waiter{class: class, ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	c.waiting++
	l.mu.Unlock()
	select {
	case <-w.ready:
		return l.releaser(class), nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	granted := w.granted
	if !granted {
		l.waiters = slices.DeleteFunc(l.waiters, func(x *waiter) bool { return x == w })
		c.waiting--
		l.forget(class)
	}
	l.mu.Unlock()
	if granted {
		l.releaser(class)()
	}
	return nil, &BusyError{Status: http.StatusServiceUnavailable, Msg: "gave up waiting for a free slot"}
}

// class returns the load of class, made if new. Called with mu held.
func (l *Limiter) class(class string) *load {
	c := l.classes[class]
	if c == nil {
		c = &load{}
		l.classes[class] = c
	}
	return c
}

// forget drops an idle class. Called with mu held.
func (l *Limiter) forget(class string) {
	if c := l.classes[class]; c != nil && c.running == 0 && c.waiting == 0 {
		delete(l.classes, class)
	}
}

func (l *Limiter) take(c *load) {
	l.running++
	c.running++
}

// releaser returns the release of a slot held by class, good once.
func (l *Limiter) releaser(class string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.running--
			l.classes[class].running--
			l.grant()
			l.forget(class)
		})
	}
}

// grant hands free slots to the longest waiting requests whose classes
// are under their share. Called with mu held.
func (l *Limiter) grant() {
	for i := 0; i < len(l.waiters) && l.running < l.slots; {
		w := l.waiters[i]
		c := l.classes[w.class]
		if c.running >= l.perClass {
			i++
			continue
		}
		l.waiters = slices.Delete(l.waiters, i, i+1)
		c.waiting--
		l.take(c)
		w.granted = true
		close(w.ready)
	}
}
