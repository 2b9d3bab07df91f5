package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"
)

// maxMessage bounds one CDP message: a full-page screenshot arrives as one
// base64 string.
const maxMessage = 64 << 20

// cdp is a Chrome DevTools Protocol connection to a browser endpoint, with
// flat sessions: enough for a screenshot, not a general client.
type cdp struct {
	ws *websocket.Conn

	mu      sync.Mutex
	next    int64
	calls   map[int64]chan cdpReply
	waiters []*cdpWaiter
	err     error // why the read loop ended
	done    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage
	Err    error
}

type cdpWaiter struct {
	method, session string
	ch              chan json.RawMessage
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// dialCDP connects to a browser's WebSocket debugger URL.
func dialCDP(ctx context.Context, url string, o *websocket.DialOptions) (*cdp, error) {
	ws, _, err := websocket.Dial(ctx, url, o)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	ws.SetReadLimit(maxMessage)
	c := &cdp{ws: ws, calls: map[int64]chan cdpReply{}, done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *cdp) Close() error { return c.ws.CloseNow() }

func (c *cdp) read() {
	defer close(c.done)
	for {
		_, b, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("devtools connection: %w", err)
			c.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		c.mu.Lock()
		if m.ID != 0 {
			if ch := c.calls[m.ID]; ch != nil {
				delete(c.calls, m.ID)
				r := cdpReply{Result: m.Result}
				if m.Error != nil {
					r.Err = fmt.Errorf("%s (%d)", m.Error.Message, m.Error.Code)
				}
				ch <- r
			}
		} else {
			for i, w := range c.waiters {
				if w.method == m.Method && w.session == m.SessionID {
					w.ch <- m.Params
					c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
					break
				}
			}
		}
		c.mu.Unlock()
	}
}

// call sends method with params on session ("" is the browser) and
// decodes the result into out (nil: ignore it).
func (c *cdp) call(ctx context.Context, session, method string, params, out any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan cdpReply, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.next++
	id := c.next
	c.calls[id] = ch
	c.mu.Unlock()
	b, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return fmt.Errorf("%s: %w", method, r.Err)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("%s: %w", method, c.readErr())
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *cdp) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("devtools connection closed")
	}
	return c.err
}

// expect registers interest in the next event method on session; call it
// before the command that causes the event.
func (c *cdp) expect(session, method string) <-chan json.RawMessage {
	w := &cdpWaiter{method: method, session: session, ch: make(chan json.RawMessage, 1)}
	c.mu.Lock()
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	return w.ch
}

// attach opens a flat session to a target.
func (c *cdp) attach(ctx context.Context, target string) (string, error) {
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &att); err != nil {
		return "", err
	}
	return att.SessionID, nil
}

// page is a page target.
type page struct {
	TargetID string `json:"targetId"`
	URL      string `json:"url"`
}

// pages lists the browser's page targets.
func (c *cdp) pages(ctx context.Context) ([]page, error) {
	var r struct {
		TargetInfos []struct {
			page
			Type string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := c.call(ctx, "", "Target.getTargets", nil, &r); err != nil {
		return nil, err
	}
	var ps []page
	for _, t := range r.TargetInfos {
		if t.Type == "page" {
			ps = append(ps, t.page)
		}
	}
	return ps, nil
}
