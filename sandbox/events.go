package sandbox

import (
	"sync"
	"time"
)

// Event is one lifecycle change of a sandbox, as this Manager made or
// observed it. Changes made by another process sharing the data dir show
// up once this Manager reads the sandbox again.
type Event struct {
	// Type is what happened: "created", "started", "stopped", "expired",
	// "removed", "ttl" (time to live changed), or a state a sandbox was
	// found in ("paused", "running").
	Type      string     `json:"type"`
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	State     State      `json:"state,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Time      time.Time  `json:"time"`
}

// eventBuffer is how far a subscriber may fall behind before it is cut
// off; a reader that cannot keep up must resubscribe and re-list rather
// than silently miss changes.
const eventBuffer = 256

// hub fans events out to subscribers.
type hub struct {
	mu   sync.Mutex
	subs map[chan Event]struct{}
}

// Subscribe returns a channel of every event from now on, and a function
// that ends the subscription. The channel is closed when the subscription
// ends, or when the subscriber fell more than eventBuffer events behind.
func (m *Manager) Subscribe() (<-chan Event, func()) {
	h := &m.events
	c := make(chan Event, eventBuffer)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan Event]struct{}{}
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
func (m *Manager) publish(typ string, sb *Sandbox) {
	h := &m.events
	e := Event{Type: typ, ID: sb.ID, Name: sb.Name, State: sb.State, Reason: sb.Reason, ExpiresAt: sb.ExpiresAt, Time: time.Now().UTC()}
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
