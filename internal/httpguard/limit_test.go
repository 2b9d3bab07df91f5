package httpguard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	release func()
	err     error
}

func acquireLater(ctx context.Context, l *Limiter, class string) chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		r, err := l.Acquire(ctx, class)
		ch <- acquired{r, err}
	}()
	return ch
}

// waitQueued waits until n requests wait in l.
func waitQueued(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		got := len(l.waiters)
		l.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", got, n)
		}
	}
}

func busy(t *testing.T, err error, status int, mention string) {
	t.Helper()
	var be *BusyError
	if !errors.As(err, &be) || be.Status != status || !strings.Contains(be.Msg, mention) {
		t.Fatalf("%v, want %d mentioning %q", err, status, mention)
	}
}

// TestLimiterShares: one class holds at most its share of the slots and
// of the queue, whatever it sends; another class still gets a slot at
// once; a freed slot goes to the longest waiting request under its
// share, and one that gives up leaves the queue.
func TestLimiterShares(t *testing.T) {
	ctx := t.Context()
	l := NewLimiter(4, 4, 0) // 2 slots and 2 waiting per class
	if l.PerClass() != 2 {
		t.Fatalf("default share: %d, want half of 4", l.PerClass())
	}
	var held []func()
	for range 2 {
		r, err := l.Acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	aWait1 := acquireLater(ctx, l, "a")
	waitQueued(t, l, 1) // in this order
	aWait2 := acquireLater(ctx, l, "a")
	waitQueued(t, l, 2)
	_, err := l.Acquire(ctx, "a")
	busy(t, err, http.StatusTooManyRequests, "for this tenant")
	// b is not held up by a's queue: slots are free for it.
	rb, err := l.Acquire(ctx, "b")
	if err != nil {
		t.Fatalf("b while a is at its share: %v", err)
	}
	admin, err := l.Acquire(ctx, "")
	if err != nil {
		t.Fatalf("the admin while a is at its share: %v", err)
	}
	// Every slot taken: b waits behind a's two.
	bWait := acquireLater(ctx, l, "b")
	waitQueued(t, l, 3)
	// a's slot goes to a's first waiter, b's to b's, not to a's second.
	held[0]()
	held[0]() // a second release is a no-op
	if got := <-aWait1; got.err != nil {
		t.Fatal(got.err)
	} else {
		held[0] = got.release
	}
	rb()
	if got := <-bWait; got.err != nil {
		t.Fatal(got.err)
	} else {
		rb = got.release
	}
	select {
	case got := <-aWait2:
		t.Fatalf("a's third request ran past its share: %v", got.err)
	default:
	}
	// Giving up leaves the queue.
	gone, cancel := context.WithCancel(ctx)
	cWait := acquireLater(gone, l, "c")
	waitQueued(t, l, 2)
	cancel()
	busy(t, (<-cWait).err, http.StatusServiceUnavailable, "gave up")
	waitQueued(t, l, 1)
	// The queue as a whole is bounded too.
	l2 := NewLimiter(1, 1, 1)
	r, _ := l2.Acquire(ctx, "x")
	yWait := acquireLater(ctx, l2, "y")
	waitQueued(t, l2, 1)
	_, err = l2.Acquire(ctx, "z")
	busy(t, err, http.StatusTooManyRequests, "too many requests in flight; retry")
	r()
	if got := <-yWait; got.err != nil {
		t.Fatal(got.err)
	} else {
		got.release()
	}
	held[0]()
	if got := <-aWait2; got.err != nil {
		t.Fatal(got.err)
	} else {
		got.release()
	}
	held[1]()
	rb()
	admin()
	if n := l.InFlight(); n != 0 || len(l.classes) != 0 {
		t.Fatalf("all released: %d in flight, classes %v", n, l.classes)
	}
}
