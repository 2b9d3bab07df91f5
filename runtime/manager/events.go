package manager

import (
	"context"
	"sync"
	"time"

	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// eventBuffer is how far a subscriber may fall behind before it is cut
// off; a reader that cannot keep up must resubscribe and re-list rather
// than silently miss changes.
const eventBuffer = 256

// hub fans events out to subscribers.
type hub struct {
	mu   sync.Mutex
	subs map[chan sandbox.Event]subscriber
}

// subscriber is whose events a subscription gets: ctx's tenant's, or
// everyone's.
type subscriber struct {
	owner  string
	scoped bool
}

// Subscribe returns a channel of every event from now on of the sandboxes
// ctx's tenant owns (every sandbox, unscoped), and a function that ends
// the subscription. The channel is closed when the subscription ends, or
// when the subscriber fell more than eventBuffer events behind.
func (m *Manager) Subscribe(ctx context.Context) (<-chan sandbox.Event, func()) {
	h := &m.events
	c := make(chan sandbox.Event, eventBuffer)
	owner, scoped := tenant.Of(ctx)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan sandbox.Event]subscriber{}
	}
	h.subs[c] = subscriber{owner: owner, scoped: scoped}
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
	e := sandbox.Event{Type: typ, ID: sb.ID, Name: sb.Name, State: sb.State, Reason: sb.Reason, ExpiresAt: sb.ExpiresAt, Time: time.Now().UTC()}
	m.fanout(e, sb.Tenant)
}

// Publish sends an event that is not a sandbox's (an agent run's
// progress) to the subscribers that may see ctx's tenant's objects.
func (m *Manager) Publish(ctx context.Context, e sandbox.Event) {
	owner, _ := tenant.Of(ctx)
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	m.fanout(e, owner)
}

// fanout sends e, of owner's, to every subscriber without ever blocking.
func (m *Manager) fanout(e sandbox.Event, owner string) {
	h := &m.events
	h.mu.Lock()
	defer h.mu.Unlock()
	for c, sub := range h.subs {
		if sub.scoped && sub.owner != owner {
			continue
		}
		select {
		case c <- e:
		default:
			delete(h.subs, c)
			close(c)
		}
	}
}
