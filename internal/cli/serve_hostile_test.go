package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/testmgr"
	"smolvm.dev/smolvm/internal/testserve"
)

// Bounds of the hostile run: it stops after this many requests or this
// long, whichever comes first, and must have sent at least hostileMin.
const (
	hostileCount   = 2400
	hostileMin     = 2000
	hostileTime    = 4 * time.Minute
	hostileWorkers = 8
)

// TestServeHostile sends a seeded stream of randomized and malformed
// requests to a real `smolvm serve` on loopback: traversal and over-long
// names, bodies over the limit, wrong methods, bad JSON, bad UTF-8, wrong
// types, unknown routes, with and without the token, to the native API,
// E2B's control plane and envd. It logs the histogram of statuses, and
// fails on any 5xx but 503 (busy, documented) and on any request that got
// no answer (a reset, an EOF, a timeout).
func TestServeHostile(t *testing.T) {
	env := testmgr.New(t)
	srv := testserve.Start(t, env.Dir, env.GuestBinary)
	// One real sandbox for the requests that need one, with its envd token.
	if code, body := apiCall(srv, http.MethodPost, "/v1/sandboxes", `{"name":"box"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	code, body := apiCall(srv, http.MethodGet, "/v1/sandboxes/box", "")
	var sb struct{ ID string }
	if code != http.StatusOK || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("get: %d %s", code, body)
	}
	code, body = apiCall(srv, http.MethodPost, "/e2b/sandboxes/"+sb.ID+"/connect", `{}`)
	var conn struct{ EnvdAccessToken string }
	if code/100 != 2 || json.Unmarshal(body, &conn) != nil {
		t.Fatalf("connect: %d %s", code, body)
	}

	g := hostileGen{rng: rand.New(rand.NewPCG(20, 2026)), id: sb.ID, envdToken: conn.EnvdAccessToken, token: srv.Token}
	reqs := make([]hostileReq, hostileCount)
	for i := range reqs {
		reqs[i] = g.next()
	}

	ctx, cancel := context.WithTimeout(context.Background(), hostileTime)
	defer cancel()
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: hostileWorkers}}
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		byKind   = map[string]map[int]int{}
		failures []string
		sent     int
	)
	work := make(chan hostileReq)
	var wg sync.WaitGroup
	for range hostileWorkers {
		wg.Go(func() {
			for r := range work {
				status, err := r.send(ctx, hc, srv.URL)
				mu.Lock()
				if ctx.Err() == nil || err == nil {
					sent++
					if err != nil && status < 500 {
						status = 0 // no answer, or a reset
					}
					statuses[status]++
					if byKind[r.kind] == nil {
						byKind[r.kind] = map[int]int{}
					}
					byKind[r.kind][status]++
					switch {
					case err != nil && status >= 500:
						failures = append(failures, fmt.Sprintf("%s %s (%s): %v", r.method, r.path, r.kind, err))
					case err != nil:
						failures = append(failures, fmt.Sprintf("%s %s (%s): no answer: %v", r.method, r.path, r.kind, err))
					}
				}
				mu.Unlock()
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

	t.Logf("hostile run: %d requests; statuses (0: no answer, or a reset):\n%s", sent, histogram(statuses))
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		t.Logf("  %-16s %s", k, strings.ReplaceAll(histogram(byKind[k]), "\n", " "))
	}
	for i, f := range failures {
		if i == 30 {
			t.Errorf("… and %d more", len(failures)-i)
			break
		}
		t.Error(f)
	}
	if sent < hostileMin {
		t.Errorf("only %d requests in %v; want at least %d", sent, hostileTime, hostileMin)
	}
	// The server still serves, and the sandbox still works.
	if code, body := apiCall(srv, http.MethodPost, "/v1/sandboxes/box/exec", `{"args":["true"]}`); code != http.StatusOK || !bytes.Contains(body, []byte(`"code":0`)) {
		t.Errorf("after the run, exec: %d %s", code, body)
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
	header             http.Header
	body               []byte
	// large, if set, is the size of a body of 'x's sent instead of body,
	// with its length declared unless chunked.
	large   int64
	chunked bool
	// raw sends the request on a connection of its own, as simple clients
	// do: the whole body before reading the answer, or with expect, what
	// curl does: wait a second for 100 Continue, then send the body unless
	// an answer came.
	raw, expect bool
}

func (r hostileReq) send(ctx context.Context, hc *http.Client, base string) (int, error) {
	if r.raw {
		return r.sendRaw(ctx, base)
	}
	var body io.Reader = bytes.NewReader(r.body)
	if r.large > 0 {
		body = io.LimitReader(xs{}, r.large)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		return 0, fmt.Errorf("building the request: %w", err)
	}
	if r.large > 0 && !r.chunked {
		req.ContentLength = r.large
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Streams (exec output, events) end with the request's bounds.
	var head bytes.Buffer
	_, err = io.Copy(io.MultiWriter(limitedWriter{&head, 300}, io.Discard), io.LimitReader(resp.Body, 8<<20))
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return resp.StatusCode, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	// 502 is E2B's proxy's answer for envd of a sandbox it cannot reach
	// (not running, or not there), which the SDK reads as "not running",
	// and for a port of the sandbox (E2b-Sandbox-Port but envd's) that
	// nothing listens on.
	unreachable := resp.StatusCode == http.StatusBadGateway && r.header.Get("E2b-Sandbox-Id") != ""
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable && !unreachable {
		return resp.StatusCode, fmt.Errorf("%d %s", resp.StatusCode, head.Bytes())
	}
	return resp.StatusCode, nil
}

func (r hostileReq) sendRaw(ctx context.Context, base string) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "%s %s HTTP/1.1\r\nHost: smolvm\r\nContent-Length: %d\r\nConnection: close\r\n", r.method, r.path, r.large)
	if r.expect {
		hdr.WriteString("Expect: 100-continue\r\n")
	}
	r.header.Write(&hdr)
	hdr.WriteString("\r\n")
	if _, err := c.Write(hdr.Bytes()); err != nil {
		return 0, err
	}
	br := bufio.NewReader(c)
	if r.expect {
		c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		c.SetReadDeadline(time.Time{})
		switch {
		case err == nil && resp.StatusCode != http.StatusContinue:
			resp.Body.Close()
			return resp.StatusCode, nil // answered: the body is not sent
		case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
			return 0, fmt.Errorf("waiting for 100 Continue: %w", err)
		}
	}
	_, werr := io.Copy(c, io.LimitReader(xs{}, r.large))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("no answer (writing the body: %v): %w", werr, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	// curl and Python's http.client give up when the body cannot be sent,
	// answer or not: a reset mid-body is a failure.
	if werr != nil {
		return resp.StatusCode, fmt.Errorf("the connection broke while sending the body (the answer was %d): %w", resp.StatusCode, werr)
	}
	return resp.StatusCode, nil
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

// hostileGen makes the run's requests from a seeded source, so that runs
// (before and after a fix) send the same ones.
type hostileGen struct {
	rng                  *rand.Rand
	id, envdToken, token string
}

// Routes the generator aims at, "{}" standing for a name. Lifecycle
// routes that would stop, fork or remove the one real sandbox only ever
// get names that are bad or unknown.
var (
	hostileNative = []string{
		"GET /v1/sandboxes/{}", "DELETE /v1/sandboxes/{}", "POST /v1/sandboxes/{}/start", "POST /v1/sandboxes/{}/stop",
		"POST /v1/sandboxes/{}/timeout", "POST /v1/sandboxes/{}/exec", "PUT /v1/sandboxes/{}/files", "GET /v1/sandboxes/{}/files",
		"GET /v1/sandboxes/{}/logs", "GET /v1/sandboxes/{}/stats", "POST /v1/sandboxes/{}/checkpoint", "POST /v1/sandboxes/{}/fork",
		"POST /v1/sandboxes/{}/pause", "POST /v1/sandboxes/{}/resume", "GET /v1/snapshots/{}", "DELETE /v1/snapshots/{}",
		"POST /v1/snapshots/{}/restore", "DELETE /v1/pools/{}", "POST /v1/pools/{}/fill", "GET /v1/sandboxes/{}/network",
		"PUT /v1/sandboxes/{}/network", "GET /v1/sandboxes/{}/network/events",
	}
	hostileE2B = []string{
		"GET /e2b/sandboxes/{}", "DELETE /e2b/sandboxes/{}", "POST /e2b/sandboxes/{}/timeout", "POST /e2b/sandboxes/{}/connect",
		"POST /e2b/v2/sandboxes/{}/connect", "POST /e2b/sandboxes/{}/pause", "PUT /e2b/sandboxes/{}/network", "POST /e2b/sandboxes/{}/fork",
		"GET /e2b/sandboxes/{}/metrics", "POST /e2b/sandboxes/{}/snapshots", "DELETE /e2b/templates/{}",
	}
	// Safe with the real sandbox's name.
	hostileSafe = []string{"GET /v1/sandboxes/{}", "GET /v1/sandboxes/{}/stats", "GET /v1/sandboxes/{}/logs", "GET /v1/sandboxes/{}/network",
		"GET /e2b/sandboxes/{}", "GET /e2b/sandboxes/{}/metrics"}
	hostileEnvd = []string{"/e2b/filesystem.Filesystem/Stat", "/e2b/filesystem.Filesystem/ListDir", "/e2b/filesystem.Filesystem/MakeDir",
		"/e2b/filesystem.Filesystem/Remove", "/e2b/filesystem.Filesystem/Move", "/e2b/process.Process/List", "/e2b/process.Process/SendSignal",
		"/e2b/process.Process/SendInput", "/e2b/process.Process/Update", "/e2b/process.Process/CloseStdin", "/e2b/files", "/e2b/health"}
	hostileSegments = []string{"..", "%2e%2e", "..%2F..%2F..%2F..%2Fsome%2Fdir%2Fname", "..%2Fx", strings.Repeat("a", 300), "",
		"%00", "%ff", "a%2Fb", "nosuch", "sha256:00", "%2F", "..%252F", "a%20b", "-x", "box%00"}
	hostileMethods = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND"}
	hostileBodies  = []string{"", "{", "[]", "null", `"x"`, "{} {}", `{"name":5}`, `{"args":"ls"}`, `{"args":[1]}`, `{"timeout":"soon"}`,
		`{"memory":"lots"}`, `{"n":"two"}`, `{"nmae":"x"}`, `{"name":"\u0000"}`, "{\"name\":\"\xff\"}", "\xff\xfe", `{"templateID":5}`,
		`{"templateID":"../../x"}`, `{"path":"../../etc/passwd"}`, `{"path":3}`, `{"args":["true"],"env":["NOEQ"]}`, `{"timeout":-1}`,
		`{"count":0}`, `{"allowOut":"x"}`, `{"name":"` + strings.Repeat("n", 300) + `"}`, `{"name":"../x"}`, `{"name_prefix":"../x"}`,
		`{"image":"a//b"}`, `{"pool":"../p"}`, `{"name":"x","size":0}`, `{"process":{"pid":"x"}}`, `{"signal":"SIGNAL_NOPE"}`}
)

func (g *hostileGen) pick(s []string) string { return s[g.rng.IntN(len(s))] }

func (g *hostileGen) next() hostileReq {
	r := hostileReq{header: http.Header{}}
	auth := g.rng.IntN(10)
	switch {
	case auth < 7:
		r.header.Set("Authorization", "Bearer "+g.token)
	case auth < 8:
		r.header.Set("X-API-KEY", g.token)
	case auth < 9:
		r.header.Set("Authorization", "Bearer wrong")
	}
	body := g.pick(hostileBodies)
	switch k := g.rng.IntN(100); {
	case k < 30: // a bad or unknown name in a route's parameter
		r.kind = "name"
		route := g.pick(append(hostileNative, hostileE2B...))
		r.method, r.path, _ = strings.Cut(route, " ")
		r.path = strings.ReplaceAll(r.path, "{}", g.pick(hostileSegments))
	case k < 38: // the real sandbox on routes that cannot hurt it
		r.kind = "real"
		r.method, r.path, _ = strings.Cut(g.pick(hostileSafe), " ")
		r.path = strings.ReplaceAll(r.path, "{}", g.pick([]string{"box", g.id}))
	case k < 48: // exec and files on the real sandbox, bodies good and bad
		r.kind = "exec/files"
		switch g.rng.IntN(3) {
		case 0:
			r.method, r.path = "POST", "/v1/sandboxes/box/exec"
			body = g.pick([]string{body, `{"args":["true"]}`, `{"args":["sh","-c","echo hi"]}`, `{"args":["no-such-cmd"]}`})
		case 1:
			r.method, r.path = "GET", "/v1/sandboxes/box/files?path="+g.pick([]string{"/etc/hostname", "../x", "/tmp/../..", "%00", "%ff", "", "/nope", "rel"})
		default:
			r.method, r.path = "PUT", "/v1/sandboxes/box/files?path="+g.pick([]string{"/tmp/h", "../x", "/tmp/%ff", "/", "/proc/x"})
		}
	case k < 58: // wrong methods on known paths
		r.kind = "method"
		route := g.pick(append(append(hostileNative, hostileE2B...), "GET /v1/sandboxes", "POST /e2b/v2/sandboxes", "GET /healthz", "GET /e2b/snapshots"))
		_, r.path, _ = strings.Cut(route, " ")
		r.path = strings.ReplaceAll(r.path, "{}", "nosuch")
		r.method = g.pick(hostileMethods)
	case k < 66: // unknown routes
		r.kind = "unknown"
		r.method = g.pick(hostileMethods[:5])
		r.path = g.pick([]string{"/", "/v2", "/v1/nope", "/e2b/nope", "/e2b/", "/v1/sandboxes/x/y/z", "/../etc/passwd", "/v1/%ff", "/e2b/v3/sandboxes", "//", "/v1/sandboxes//start"})
	case k < 74: // bad bodies to the create routes (never a valid create)
		r.kind = "create"
		r.method = "POST"
		r.path = g.pick([]string{"/v1/sandboxes", "/v1/pools", "/e2b/sandboxes", "/e2b/v2/sandboxes"})
	case k < 90: // envd, with the real sandbox's token or not
		r.kind = "envd"
		r.method = g.pick([]string{"POST", "POST", "POST", "GET", "PUT"})
		r.path = g.pick(hostileEnvd)
		if r.path == "/e2b/files" {
			r.path += "?path=" + g.pick([]string{"/tmp/e", "../x", "%00", "%ff", strings.Repeat("a", 300)})
		}
		r.header.Set("E2b-Sandbox-Id", g.pick([]string{g.id, g.id, "nosuch", "..", "../x", strings.Repeat("a", 300), "\xff"}))
		switch g.rng.IntN(4) {
		case 0, 1:
			r.header.Set("X-Access-Token", g.envdToken)
		case 2:
			r.header.Set("X-Access-Token", "wrong")
		}
		if g.rng.IntN(5) == 0 {
			r.header.Set("E2b-Sandbox-Port", g.pick([]string{"49983", "8080", "0", "99999", "x"}))
		}
		r.header.Set("Content-Type", "application/json")
		body = g.pick([]string{body, `{"path":"/tmp"}`, `{"path":"/etc/hostname"}`, `{"source":"/tmp/a","destination":"/tmp/../.."}`})
	default: // bodies over the limit, declared or chunked
		r.kind = "large"
		r.method, r.path = "POST", g.pick([]string{"/v1/sandboxes/box/exec", "/v1/sandboxes", "/e2b/v2/sandboxes", "/v1/pools/nosuch/fill", "/e2b/filesystem.Filesystem/Stat"})
		if strings.Contains(r.path, "filesystem") {
			r.header.Set("E2b-Sandbox-Id", g.id)
			r.header.Set("X-Access-Token", g.envdToken)
		}
		r.large = 2 << 20
		if g.rng.IntN(4) == 0 {
			r.large = 20 << 20
		}
		switch g.rng.IntN(4) {
		case 0:
			r.chunked = true
		case 1:
			r.raw = true
		case 2:
			r.raw, r.expect = true, true
		}
		return r
	}
	r.body = []byte(body)
	return r
}
