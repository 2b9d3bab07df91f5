package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/internal/bench/series"
	"smolvm.dev/smolvm/sandbox"
)

// BenchmarkGatewayCreate is the cost of going through Kubernetes: a
// create through the gateway (a Sandbox object, the binder, a node
// daemon, the gateway's wait) against a create straight on a node's
// smolvm serve, in the same run, one at a time and alternating; for the
// native API (the Go client) and E2B's (POST /sandboxes, as the SDK
// sends it). Each sandbox is removed before the next.
func BenchmarkGatewayCreate(b *testing.B) {
	c := start(b)
	ctx := context.Background()
	gw, err := client.New(c.URL, keyA)
	if err != nil {
		b.Fatal(err)
	}
	n1 := c.nodes[0]
	opts := sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true}
	native := func(sc *client.Client, s *series.Series) {
		t0 := time.Now()
		sb, err := sc.Create(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		s.Samples = append(s.Samples, time.Since(t0))
		if err := sc.Remove(ctx, sb.ID, true); err != nil {
			b.Fatal(err)
		}
	}
	e2b := func(base, key string, s *series.Series) {
		t0 := time.Now()
		var out struct {
			SandboxID string `json:"sandboxID"`
		}
		if code := call(b, "POST", base+"/sandboxes", key, `{"templateID":"base","timeout":300}`, &out); code != http.StatusCreated {
			b.Fatalf("E2B create at %s: %d", base, code)
		}
		s.Samples = append(s.Samples, time.Since(t0))
		if code := call(b, "DELETE", base+"/sandboxes/"+out.SandboxID, key, "", nil); code != http.StatusNoContent {
			b.Fatalf("E2B kill at %s: %d", base, code)
		}
	}
	viaNative := series.Series{Name: "native create through the gateway", Baseline: "native create on the node"}
	directNative := series.Series{Name: "native create on the node"}
	viaE2B := series.Series{Name: "E2B create through the gateway", Baseline: "E2B create on the node"}
	directE2B := series.Series{Name: "E2B create on the node"}
	steps := []func(){
		func() { native(gw, &viaNative) },
		func() { native(n1.Smolvm, &directNative) },
		func() { e2b(c.URL, keyA, &viaE2B) },
		func() { e2b(n1.Serve.URL+"/e2b", nodeToken, &directE2B) },
	}
	b.ResetTimer()
	for i := range b.N {
		// Each round in another order, so that none always runs first.
		for j := range steps {
			steps[(i+j)%len(steps)]()
		}
	}
	b.StopTimer()
	for _, s := range []series.Series{viaNative, directNative, viaE2B, directE2B} {
		b.Logf("%-36s p50 %4d ms  p99 %4d ms", s.Name, s.Quantile(0.5).Milliseconds(), s.Quantile(0.99).Milliseconds())
		unit := strings.ReplaceAll(strings.Fields(s.Name)[0]+"-"+strings.Fields(s.Name)[len(strings.Fields(s.Name))-1], " ", "-")
		b.ReportMetric(float64(s.Quantile(0.5).Milliseconds()), unit+"-p50-ms")
		b.ReportMetric(float64(s.Quantile(0.99).Milliseconds()), unit+"-p99-ms")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average: %s", strings.TrimSpace(string(load)))
}

// call sends a JSON request with an E2B API key and decodes the answer.
func call(tb testing.TB, method, url, key, body string, out any) int {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(buf.Bytes(), out); err != nil {
			tb.Fatal(fmt.Errorf("%s %s: %w: %s", method, url, err, buf.String()))
		}
	}
	return resp.StatusCode
}
