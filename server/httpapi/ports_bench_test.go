package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
)

// keepAliveServer answers every GET with "ok" over HTTP/1.1 keep-alive,
// so both paths measure requests, not connection set-up, in one write
// (headers and body apart meet delayed ACKs: 40 ms a request).
const keepAliveServer = `
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
ThreadingHTTPServer(('0.0.0.0', 8000), H).serve_forever()`

// BenchmarkPortRoute sends GET requests, one at a time over a kept
// connection, to one server inside a sandbox by two ways in the same run:
// serve's port route (/v1/sandboxes/{id}/ports/8000/, through the agent),
// and, as the baseline, straight to the port published on the host's
// loopback (--net egress -p 8000, in a closed test world). It reports
// p50/p99 and requests per second of each.
//
//	go test -run X -bench PortRoute -benchtime 2000x ./server/httpapi
func BenchmarkPortRoute(b *testing.B) {
	w := nettest.New(b)
	helper := testenv.Smolvm(b)
	env := testmgr.New(b, func(c *manager.Config) { c.Network = w.Host(helper) })
	ctx := context.Background()
	sb, err := env.Manager.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{
		Network: &sandbox.Network{Mode: sandbox.NetEgress, Ports: []sandbox.Port{{Port: 8000}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	if exit, err := env.Manager.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", `python3 -c "$0" >/dev/null 2>&1 &`, keepAliveServer}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		b.Fatalf("start server: %v %+v", err, exit)
	}
	st, err := env.Manager.NetStatus(ctx, sb.ID)
	if err != nil || len(st.Ports) != 1 {
		b.Fatalf("net status: %v %+v", err, st)
	}
	published := net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Ports[0].HostPort))
	proxy := ports.New(env.Manager.DialPort)
	b.Cleanup(proxy.Close)
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Token: "bench", TempDir: b.TempDir(), Ports: proxy}))
	b.Cleanup(hs.Close)

	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return nettest.Dial(ctx, w.HostNS, published)
	}}}
	get := func(c *http.Client, url string, hdr ...string) time.Duration {
		req, _ := http.NewRequest("GET", url, nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		t := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
			b.Fatalf("GET %s: %d %q %v", url, resp.StatusCode, body, err)
		}
		return time.Since(t)
	}
	routeURL := hs.URL + "/v1/sandboxes/" + sb.ID + "/ports/8000/"
	// Wait for the server, and warm both connections.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.DefaultClient.Do(mustReq(routeURL, "Authorization", "Bearer bench"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the server in the sandbox never answered: %v", err)
		}
	}
	get(direct, "http://sandbox/")
	get(http.DefaultClient, routeURL, "Authorization", "Bearer bench")

	route := bench.Series{Name: "GET through serve's port route (agent splice)", Baseline: "GET to the published port (loopback)"}
	base := bench.Series{Name: "GET to the published port (loopback)"}
	for b.Loop() {
		route.Samples = append(route.Samples, get(http.DefaultClient, routeURL, "Authorization", "Bearer bench"))
		base.Samples = append(base.Samples, get(direct, "http://sandbox/"))
	}
	bench.Print(os.Stdout, []bench.Series{base, route})
	for _, s := range []struct {
		prefix string
		s      bench.Series
	}{{"route-", route}, {"direct-", base}} {
		var total time.Duration
		for _, d := range s.s.Samples {
			total += d
		}
		rps := float64(len(s.s.Samples)) / total.Seconds()
		fmt.Printf("%s: %.0f requests/s, one connection, one request at a time\n", s.s.Name, rps)
		b.ReportMetric(rps, s.prefix+"req/s")
		report(b, s.prefix, s.s.Samples)
	}
}

func mustReq(url string, hdr ...string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set(hdr[0], hdr[1])
	return req
}
