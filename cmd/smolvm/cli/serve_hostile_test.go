package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/tests/testserve"
)

// Bounds of the hostile run: it stops after this many requests (and the
// twins of those that name what their credentials do not open) or this
// long, whichever comes first, and must have sent at least hostileMin.
const (
	hostileCount   = 6000
	hostileMin     = 4800
	hostileTime    = 6 * time.Minute
	hostileWorkers = 8
	// hostileDomain is serve's --domain: ports by Host are
	// PORT-ID.hostileDomain, sent to the loopback address all the same.
	hostileDomain = "hostile.test"
	// hostileStream is how long an answer's body is read: streams (exec
	// output, events) are cut there.
	hostileStream = 2 * time.Second
	// hostileKeep is how much of a body is kept, to compare twins'.
	hostileKeep = 64 << 10
)

// TestServeHostile sends a seeded stream of randomized and malformed
// requests to a real `smolvm serve` on loopback with two tenants, a and
// b: every route of its OpenAPI document (read from GET /openapi.json),
// E2B's control plane (under /e2b and at the root), envd, and sandboxes'
// ports by Host and by E2B's headers. Requests carry a's key, b's, the
// admin token, no key, a junk one, or credentials that disagree (which
// must get a 401); they name the admin's, a's and b's running sandboxes
// (only on routes that cannot hurt them), a's removed sandbox, a member of
// a's warm pool and a's pool, by ID, 4-digit prefix and name, or bad and
// unknown names; with traversal and over-long names, bodies over the
// limit, wrong methods, bad JSON, bad UTF-8, wrong types, unknown routes,
// request lines and headers no client sends. A request naming what its
// credentials do not open (another tenant's, or any sandbox's envd or
// ports without its token) must get exactly the answer of its twin, the
// same request naming a missing object of the same shape, sent right
// after it. It logs the histogram of statuses, and fails on any 5xx but
// 503 (busy, documented), 502 (envd, or a port, of a sandbox it cannot
// reach) and net/http's own 501 and 505 (hostileTexts), on any request
// that got no answer (a reset, an EOF, a timeout), on twins that differ,
// and on anything of the sandboxes left on the host once they are
// removed.
func TestServeHostile(t *testing.T) {
	env := testmgr.New(t)
	leaks := watchLeaks(t, env.Dir)
	srv := testserve.Start(t, env.Dir, env.GuestBinary, "--domain", hostileDomain)
	w := newHostileWorld(t, srv, env)
	g := hostileGen{rng: rand.New(rand.NewPCG(20, 2026)), w: w, routes: hostileRoutes(t, srv), hit: map[string]int{}}
	reqs := make([]hostileReq, hostileCount)
	for i := range reqs {
		reqs[i] = g.next()
	}
	for _, route := range g.routes {
		if g.hit[route] == 0 {
			t.Errorf("the run sends nothing to %s", route)
		}
	}

	began := time.Now()
	tally := runHostile(srv.URL, reqs)
	tally.report(t, time.Since(began))
	if tally.sent < hostileMin {
		t.Errorf("only %d requests in %v; want at least %d", tally.sent, hostileTime, hostileMin)
	}
	// The server still serves, and the sandboxes still work.
	for _, b := range []struct {
		box *hostileBox
		key string
	}{{&w.box, w.token}, {&w.boxA, w.keyA}, {&w.boxB, w.keyB}} {
		if code, body := keyCall(t, srv, b.key, http.MethodPost, "/v1/sandboxes/"+b.box.name+"/exec", `{"args":["true"]}`); code != http.StatusOK || !strings.Contains(body, `"code":0`) {
			t.Errorf("after the run, exec in %s: %d %s", b.box.name, code, body)
		}
	}
	removeAll(t, srv)
	leaks.check(t, nil)
}

// hostileTally is what a run saw.
type hostileTally struct {
	mu             sync.Mutex
	sent           int
	statuses       map[int]int
	byKind         map[string]map[int]int
	failures       []string
	twins, skipped int
	// required counts the requests that had one status to get.
	required int
}

// runHostile sends reqs to base from hostileWorkers goroutines, each
// request's twin right after it, until they are all sent or hostileTime
// is up.
func runHostile(base string, reqs []hostileReq) *hostileTally {
	ctx, cancel := context.WithTimeout(context.Background(), hostileTime)
	defer cancel()
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: hostileWorkers}}
	tally := &hostileTally{statuses: map[int]int{}, byKind: map[string]map[int]int{}}
	work := make(chan hostileReq)
	var wg sync.WaitGroup
	for range hostileWorkers {
		wg.Go(func() {
			for r := range work {
				a, err := r.send(ctx, hc, base)
				var twin hostileAnswer
				var twinErr error
				if r.twin != nil && err == nil {
					twin, twinErr = r.twin.send(ctx, hc, base)
				}
				if ctx.Err() != nil && (err != nil || twinErr != nil) {
					continue // cut short by the run's end
				}
				tally.add(r, a, err)
				if r.twin != nil && err == nil {
					tally.add(*r.twin, twin, twinErr)
					tally.compare(r, a, twin, twinErr)
				}
			}
		})
	}
	for _, r := range reqs {
		select {
		case work <- r:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(work)
	wg.Wait()
	return tally
}

// add counts r's answer a (err: none came), and its faults.
func (tl *hostileTally) add(r hostileReq, a hostileAnswer, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.sent++
	status := a.status
	if err != nil {
		status = 0 // no answer, or a reset
	}
	tl.statuses[status]++
	if tl.byKind[r.kind] == nil {
		tl.byKind[r.kind] = map[int]int{}
	}
	tl.byKind[r.kind][status]++
	if r.want != 0 {
		tl.required++
	}
	switch {
	case err != nil:
		tl.failures = append(tl.failures, fmt.Sprintf("%s: no answer: %v", r, err))
	case r.fault(a) != "":
		tl.failures = append(tl.failures, fmt.Sprintf("%s: %s", r, r.fault(a)))
	}
}

// compare fails the run if r, naming what its credentials do not open,
// got another answer than its twin, naming nothing. A busy answer (503,
// 429) of either says nothing: it is skipped.
func (tl *hostileTally) compare(r hostileReq, got, want hostileAnswer, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	busy := func(s int) bool { return s == http.StatusServiceUnavailable || s == http.StatusTooManyRequests }
	switch {
	case err != nil:
		return // counted by add
	case busy(got.status) || busy(want.status):
		tl.skipped++
		return
	}
	tl.twins++
	// The name sent may come back; nothing else may differ. (The missing
	// name is the one replaced: "box" is in every "sandbox".)
	alike := strings.ReplaceAll(want.body, r.twin.ref, r.ref)
	if got.status != want.status || got.header != want.header || (got.body != want.body && got.body != alike) {
		tl.failures = append(tl.failures, fmt.Sprintf("%s: %d %s\n%s\nwhile naming nothing (%s) gets %d %s\n%s",
			r, got.status, head(got.body), got.header, r.twin.ref, want.status, head(want.body), want.header))
	}
}

// report logs the histograms and fails t for each fault.
func (tl *hostileTally) report(t *testing.T, took time.Duration) {
	t.Helper()
	t.Logf("hostile run: %d requests in %s, %d twins compared (%d skipped: busy), %d with one status to get; statuses (0: no answer, or a reset):\n%s",
		tl.sent, took.Round(time.Second), tl.twins, tl.skipped, tl.required, histogram(tl.statuses))
	kinds := slices.Sorted(maps.Keys(tl.byKind))
	for _, k := range kinds {
		t.Logf("  %-12s %s", k, strings.ReplaceAll(histogram(tl.byKind[k]), "\n", " "))
	}
	for i, f := range tl.failures {
		if i == 40 {
			t.Errorf("… and %d more", len(tl.failures)-i)
			break
		}
		t.Error(f)
	}
}

// removeAll removes every pool and sandbox of srv, as the admin.
func removeAll(t *testing.T, srv *testserve.Server) {
	t.Helper()
	code, body := apiCall(srv, http.MethodGet, "/v1/pools", "")
	var pools []struct{ Name string }
	if code != http.StatusOK || json.Unmarshal(body, &pools) != nil {
		t.Fatalf("pools: %d %s", code, body)
	}
	for _, p := range pools {
		if code, body := apiCall(srv, http.MethodDelete, "/v1/pools/"+p.Name, ""); code != http.StatusNoContent {
			t.Errorf("rm pool %s: %d %s", p.Name, code, body)
		}
	}
	for _, id := range listIDs(t, srv) {
		if code, body := apiCall(srv, http.MethodDelete, "/v1/sandboxes/"+id+"?force=true", ""); code != http.StatusNoContent {
			t.Errorf("rm %s: %d %s", id, code, body)
		}
	}
}

func histogram(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var b strings.Builder
	for _, c := range codes {
		fmt.Fprintf(&b, "%d: %d\n", c, m[c])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// hostileReq is one request of the run.
type hostileReq struct {
	kind, method, path string
	// host, if set, is the Host header (ports by Host); the request still
	// goes to the server's loopback address.
	host   string
	header http.Header
	// who says what credentials header carries, for messages.
	who  string
	body []byte
	// large, if set, is the size of a body of 'x's sent instead of body,
	// with its length declared unless chunked.
	large   int64
	chunked bool
	// raw sends the request on a connection of its own, as simple clients
	// do: the whole body before reading the answer, or with expect, what
	// curl does: wait a second for 100 Continue, then send the body unless
	// an answer came.
	raw, expect bool
	// text, if set, is the whole request, written as is on a connection
	// of its own: request lines and headers no client would send.
	text string
	// proxied is set for envd and ports, whose 502 is E2B's proxy's
	// answer for a sandbox it cannot reach (not running, or not there),
	// which the SDK reads as "not running", and for a port of the sandbox
	// that nothing listens on.
	proxied bool
	// want, if set, is the only status the request may get, for why.
	want int
	why  string
	// ref is what the request names; twin, if set, is the same request
	// naming a missing object of ref's shape, whose answer this one's
	// must equal (but for the name): ref is what its credentials do not
	// open.
	ref  string
	twin *hostileReq
}

func (r hostileReq) String() string {
	s := r.method + " " + r.path
	if r.host != "" {
		s += " Host: " + r.host
	}
	for _, k := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
		if v := r.header.Get(k); v != "" {
			s += " " + k + ": " + v
		}
	}
	if len(r.body) > 0 {
		s += " " + head(string(r.body))
	}
	return s + " (" + r.kind + "; " + r.who + ")"
}

// fault says what is wrong with a, r's answer ("" if nothing).
func (r hostileReq) fault(a hostileAnswer) string {
	unreachable := a.status == http.StatusBadGateway && r.proxied
	switch {
	case a.status >= 500 && a.status != http.StatusServiceUnavailable && !unreachable && a.status != r.want:
		return fmt.Sprintf("%d %s", a.status, head(a.body))
	case r.want != 0 && a.status != r.want:
		return fmt.Sprintf("%d %s; want %d: %s", a.status, head(a.body), r.want, r.why)
	}
	return ""
}

// hostileAnswer is what a request got: its status, its headers but the
// date, and the first hostileKeep bytes of its body.
type hostileAnswer struct {
	status       int
	header, body string
}

// errStreamCut ends the read of a body at hostileStream.
var errStreamCut = errors.New("stream cut")

func (r hostileReq) send(ctx context.Context, hc *http.Client, base string) (hostileAnswer, error) {
	switch {
	case r.raw:
		return r.sendRaw(ctx, base)
	case r.text != "":
		return r.sendText(ctx, base)
	}
	ctx, cut := context.WithCancelCause(ctx)
	defer cut(nil)
	var body io.Reader = bytes.NewReader(r.body)
	if r.large > 0 {
		body = io.LimitReader(xs{}, r.large)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		return hostileAnswer{}, fmt.Errorf("building the request: %w", err)
	}
	if r.large > 0 && !r.chunked {
		req.ContentLength = r.large
	}
	req.Host = r.host
	for k, v := range r.header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return hostileAnswer{}, err
	}
	defer resp.Body.Close()
	stop := time.AfterFunc(hostileStream, func() { cut(errStreamCut) })
	defer stop.Stop()
	var kept bytes.Buffer
	_, err = io.Copy(io.MultiWriter(limitedWriter{&kept, hostileKeep}, io.Discard), io.LimitReader(resp.Body, 8<<20))
	if err != nil && !errors.Is(context.Cause(ctx), errStreamCut) && !errors.Is(err, context.DeadlineExceeded) {
		return hostileAnswer{status: resp.StatusCode}, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	resp.Header.Del("Date")
	var h bytes.Buffer
	resp.Header.Write(&h)
	return hostileAnswer{resp.StatusCode, h.String(), kept.String()}, nil
}

func (r hostileReq) sendRaw(ctx context.Context, base string) (hostileAnswer, error) {
	c, err := dialRun(ctx, base)
	if err != nil {
		return hostileAnswer{}, err
	}
	defer c.Close()
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "%s %s HTTP/1.1\r\nHost: smolvm\r\nContent-Length: %d\r\nConnection: close\r\n", r.method, r.path, r.large)
	if r.expect {
		hdr.WriteString("Expect: 100-continue\r\n")
	}
	r.header.Write(&hdr)
	hdr.WriteString("\r\n")
	if _, err := c.Write(hdr.Bytes()); err != nil {
		return hostileAnswer{}, err
	}
	br := bufio.NewReader(c)
	if r.expect {
		c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		c.SetReadDeadline(time.Time{})
		switch {
		case err == nil && resp.StatusCode != http.StatusContinue:
			resp.Body.Close()
			return hostileAnswer{status: resp.StatusCode}, nil // answered: the body is not sent
		case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
			return hostileAnswer{}, fmt.Errorf("waiting for 100 Continue: %w", err)
		}
	}
	_, werr := io.Copy(c, io.LimitReader(xs{}, r.large))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return hostileAnswer{}, fmt.Errorf("no answer (writing the body: %v): %w", werr, err)
	}
	a, err := readAnswer(resp)
	if err != nil {
		return a, err
	}
	// curl and Python's http.client give up when the body cannot be sent,
	// answer or not: a reset mid-body is a failure.
	if werr != nil {
		return a, fmt.Errorf("the connection broke while sending the body (the answer was %d): %w", resp.StatusCode, werr)
	}
	return a, nil
}

func (r hostileReq) sendText(ctx context.Context, base string) (hostileAnswer, error) {
	c, err := dialRun(ctx, base)
	if err != nil {
		return hostileAnswer{}, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, r.text); err != nil {
		return hostileAnswer{}, fmt.Errorf("writing the request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return hostileAnswer{}, fmt.Errorf("no answer: %w", err)
	}
	return readAnswer(resp)
}

// dialRun opens a connection of its own to base, which ends with the run.
func dialRun(ctx context.Context, base string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	return c, nil
}

// readAnswer reads resp, read on a connection of its own, whole.
func readAnswer(resp *http.Response) (hostileAnswer, error) {
	defer resp.Body.Close()
	var kept bytes.Buffer
	if _, err := io.Copy(limitedWriter{&kept, hostileKeep}, resp.Body); err != nil {
		return hostileAnswer{status: resp.StatusCode}, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	return hostileAnswer{status: resp.StatusCode, body: kept.String()}, nil
}

// head is the start of a body, for messages.
func head(body string) string {
	if len(body) > 300 {
		return body[:300] + "…"
	}
	return body
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	b *bytes.Buffer
	n int
}

func (w limitedWriter) Write(p []byte) (int, error) {
	if rest := w.n - w.b.Len(); rest > 0 {
		w.b.Write(p[:min(len(p), rest)])
	}
	return len(p), nil
}

// xs reads as endless 'x's.
type xs struct{}

func (xs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}
