package manager

import (
	"sync"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// eventBuffer is how far a subscriber may fall behind before it is cut
// off; a reader that cannot keep up must resubscribe and re-list rather
// than silently miss changes.
const eventBuffer = 256

// hub fans events out to subscribers.
type hub struct {
	mu   sync.Mutex
	subs map[chan sandbox.Event]struct{}
}

// Subscribe returns a channel of every event from now on, and a function
// that ends the subscription. The channel is closed when the subscription
// ends, or when the subscriber fell more than eventBuffer events behind.
func (m *Manager) Subscribe() (<-chan sandbox.Event, func()) {
	h := &m.events
	c := make(chan sandbox.Event, eventBuffer)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan sandbox.Event]struct{}{}
	}
	h.subs[c] = struct{}{}
	h.mu.Unlock()
	return c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[c]; ok {
			delete(h.subs, c)
			close(c)
		}
	}
}

// publish sends typ for sb to every subscriber without ever blocking.
func (m *Manager) publish(typ string, sb *sandbox.Sandbox) {
	h := &m.events
	e := sandbox.Event{Type: typ, ID: sb.ID, Name: sb.Name, State: sb.State, Reason: sb.Reason, ExpiresAt: sb.ExpiresAt, Time: time.Now().UTC()}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- e:
		default:
			delete(h.subs, c)
			close(c)
		}
	}
}
