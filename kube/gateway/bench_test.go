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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/kube/api/v1alpha1"
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
	gw := c.client(b, keyA)
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
	if resp.StatusCode >= 400 {
		tb.Logf("%s %s: %d %s", method, url, resp.StatusCode, buf.String())
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(buf.Bytes(), out); err != nil {
			tb.Fatal(fmt.Errorf("%s %s: %w: %s", method, url, err, buf.String()))
		}
	}
	return resp.StatusCode
}

// BenchmarkRestoreLocality is a restore placed by snapshot locality (on
// the node holding the snapshot) against one on another node, which
// copies the snapshot first: from the Sandbox's create until it is
// Running, each round a fresh snapshot (sealed before timing), in
// alternating order; of an idle sandbox, and of one holding 200 MiB of
// random bytes in memory (a file in its writable layer).
func BenchmarkRestoreLocality(b *testing.B) {
	c := start(b)
	gw := c.client(b, keyA)
	for _, size := range []struct {
		name string
		mib  int
	}{{"idle", 0}, {"200MiB", 200}} {
		src := "src-" + strings.ToLower(size.name)
		c.put(b, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: src}, Spec: v1alpha1.SandboxSpec{SandboxBody: sleeper, NodeName: "n1"}})
		sb := c.sandboxIn(b, src, v1alpha1.PhaseRunning)
		if size.mib > 0 {
			// The rootfs's writable layer is memory (gVisor's overlay), so a
			// file in /tmp is in the checkpoint.
			cmd := fmt.Sprintf("head -c %dM /dev/urandom > /tmp/blob", size.mib)
			var out strings.Builder
			if exit, err := gw.Exec(context.Background(), sb.Status.Instances[0].ID, sandbox.Process{Args: []string{"sh", "-c", cmd}}, sandbox.Stdio{Stdout: &out, Stderr: &out}); err != nil || exit.Code != 0 {
				b.Fatalf("%s: %v %+v %s", cmd, err, exit, out.String())
			}
		}
		rounds := 0
		b.Run(size.name, func(b *testing.B) {
			rounds = c.restoreRounds(b, src, rounds)
		})
	}
}

// restoreRounds runs b.N rounds of BenchmarkRestoreLocality from src,
// naming its objects from round first on; it returns the next round.
func (c *cluster) restoreRounds(b *testing.B, src string, first int) int {
	ctx := context.Background()
	local := series.Series{Name: "restore on the holder"}
	copied := series.Series{Name: "restore on another node (copy)", Baseline: "restore on the holder"}
	copies := series.Series{Name: "the copy itself (status.copies)"}
	var bytes int64
	restore := func(name, snap, node string, s *series.Series) {
		t0 := time.Now()
		c.put(b, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SandboxSpec{ForkFrom: &v1alpha1.ForkFrom{Snapshot: snap}, NodeName: node}})
		c.sandboxIn(b, name, v1alpha1.PhaseRunning)
		s.Samples = append(s.Samples, time.Since(t0))
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		snap := fmt.Sprintf("%s-%d", src, first+i)
		c.put(b, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: snap}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: src}, NodeName: "n1"}})
		obj := c.snapshotReady(b, snap)
		c.sealed(b, 0, obj.Status.ID)
		b.StartTimer()
		steps := []func(){
			func() { restore("l-"+snap, snap, "n1", &local) },
			func() { restore("c-"+snap, snap, "n2", &copied) },
		}
		steps[i%2]()
		steps[(i+1)%2]()
		b.StopTimer()
		obj = c.snapshotReady(b, snap)
		for _, cp := range obj.Status.Copies {
			copies.Samples, bytes = append(copies.Samples, time.Duration(cp.Milliseconds)*time.Millisecond), cp.Bytes
		}
		for _, name := range []string{"l-" + snap, "c-" + snap} {
			if err := c.k.Client.Delete(ctx, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.k.Client.Delete(ctx, obj); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, s := range []series.Series{local, copied, copies} {
		b.Logf("%-36s p50 %5d ms  p99 %5d ms", s.Name, s.Quantile(0.5).Milliseconds(), s.Quantile(0.99).Milliseconds())
	}
	b.ReportMetric(float64(local.Quantile(0.5).Milliseconds()), "holder-p50-ms")
	b.ReportMetric(float64(local.Quantile(0.99).Milliseconds()), "holder-p99-ms")
	b.ReportMetric(float64(copied.Quantile(0.5).Milliseconds()), "copy-p50-ms")
	b.ReportMetric(float64(copied.Quantile(0.99).Milliseconds()), "copy-p99-ms")
	b.ReportMetric(float64(bytes>>20), "snapshot-MiB")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("snapshot of %d bytes; load average: %s", bytes, strings.TrimSpace(string(load)))
	return first + b.N
}

// sealed waits until node i's snapshot id is durable (hashed): a copy
// waits for that, and the figure is the copy's, not the seal's.
func (c *cluster) sealed(tb testing.TB, i int, id string) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		snaps, err := c.nodes[i].Smolvm.Snapshots(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		for _, s := range snaps {
			if s.ID == id && s.Durable {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("snapshot %s not sealed on %s within a minute", id, c.nodes[i].Name)
}

// BenchmarkWarmClaim is a create claimed from a warm pool against a
// create of the same template, both through the gateway (E2B's POST
// /sandboxes, as the SDK sends it), one at a time, alternating; the pool
// refills between rounds, untimed.
func BenchmarkWarmClaim(b *testing.B) {
	c := start(b)
	c.put(b, &v1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}, Spec: v1alpha1.SandboxTemplateSpec{SandboxBody: sleeper}})
	c.put(b, &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "warm"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1, SandboxTemplateRef: &v1alpha1.LocalRef{Name: "tmpl"}}})
	c.claims(b, "warm", "tmpl", "claim from the warm pool", "create of its template")
}

// BenchmarkHotClaim is a create claimed from a hot pool of a snapshot
// (a paused restore, resumed) against a create restoring the same
// snapshot (E2B's templateID naming it), as BenchmarkWarmClaim.
func BenchmarkHotClaim(b *testing.B) {
	c := start(b)
	c.put(b, &v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "src"}, Spec: v1alpha1.SandboxSpec{SandboxBody: sleeper, NodeName: "n1"}})
	c.sandboxIn(b, "src", v1alpha1.PhaseRunning)
	c.put(b, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "setup"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxRef: v1alpha1.LocalRef{Name: "src"}, NodeName: "n1"}})
	c.snapshotReady(b, "setup")
	c.put(b, &v1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "hot"}, Spec: v1alpha1.SandboxWarmPoolSpec{Replicas: 1, SandboxSnapshotRef: &v1alpha1.LocalRef{Name: "setup"}, Hot: true}})
	c.claims(b, "hot", "setup", "claim from the hot pool", "restore of its snapshot")
}

// claims times E2B creates of templateID pool against ones of other, one
// at a time, alternating, with the pool refilled between rounds.
func (c *cluster) claims(b *testing.B, pool, other, name, otherName string) {
	claims := series.Series{Name: name, Baseline: otherName}
	creates := series.Series{Name: otherName}
	one := func(template string, s *series.Series) {
		var out struct {
			SandboxID string `json:"sandboxID"`
		}
		t0 := time.Now()
		if code := call(b, "POST", c.URL+"/sandboxes", keyA, `{"templateID":"`+template+`","timeout":300}`, &out); code != http.StatusCreated {
			b.Fatalf("create %s: %d", template, code)
		}
		s.Samples = append(s.Samples, time.Since(t0))
		if code := call(b, "DELETE", c.URL+"/sandboxes/"+out.SandboxID, keyA, "", nil); code != http.StatusNoContent {
			b.Fatalf("kill: %d", code)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		c.pooled(b, pool, 1)
		b.StartTimer()
		steps := []func(){func() { one(pool, &claims) }, func() { one(other, &creates) }}
		steps[i%2]()
		steps[(i+1)%2]()
	}
	b.StopTimer()
	for _, s := range []series.Series{claims, creates} {
		b.Logf("%-28s p50 %4d ms  p99 %4d ms", s.Name, s.Quantile(0.5).Milliseconds(), s.Quantile(0.99).Milliseconds())
	}
	b.ReportMetric(float64(claims.Quantile(0.5).Milliseconds()), "claim-p50-ms")
	b.ReportMetric(float64(claims.Quantile(0.99).Milliseconds()), "claim-p99-ms")
	b.ReportMetric(float64(creates.Quantile(0.5).Milliseconds()), "create-p50-ms")
	b.ReportMetric(float64(creates.Quantile(0.99).Milliseconds()), "create-p99-ms")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average: %s", strings.TrimSpace(string(load)))
}

// BenchmarkGatewaySnapshot is E2B's snapshot round through the cluster
// against the same on one node's smolvm serve, in the same run and
// alternating: createSnapshot of a running sandbox (a SandboxSnapshot
// saved by its node), then Sandbox.create from it (a Sandbox restoring
// it, placed beside it), each until answered. The copy and the snapshot
// are removed after each round, untimed.
func BenchmarkGatewaySnapshot(b *testing.B) {
	c := start(b)
	n1 := c.nodes[0]
	type side struct {
		base, key, src string
		snap, restore  series.Series
	}
	sides := []*side{
		{base: c.URL, key: keyA, snap: series.Series{Name: "createSnapshot through the gateway", Baseline: "createSnapshot on the node"},
			restore: series.Series{Name: "create from it through the gateway", Baseline: "create from it on the node"}},
		{base: n1.Serve.URL + "/e2b", key: nodeToken, snap: series.Series{Name: "createSnapshot on the node"},
			restore: series.Series{Name: "create from it on the node"}},
	}
	for _, s := range sides {
		var out struct {
			SandboxID string `json:"sandboxID"`
		}
		if code := call(b, "POST", s.base+"/sandboxes", s.key, `{"templateID":"base","timeout":3600}`, &out); code != http.StatusCreated {
			b.Fatalf("source at %s: %d", s.base, code)
		}
		s.src = out.SandboxID
	}
	round := func(s *side, i int) {
		var snap struct {
			SnapshotID string `json:"snapshotID"`
		}
		t0 := time.Now()
		if code := call(b, "POST", s.base+"/sandboxes/"+s.src+"/snapshots", s.key, fmt.Sprintf(`{"name":"bench-%d"}`, i), &snap); code != http.StatusCreated {
			b.Fatalf("createSnapshot at %s: %d", s.base, code)
		}
		s.snap.Samples = append(s.snap.Samples, time.Since(t0))
		var cp struct {
			SandboxID string `json:"sandboxID"`
		}
		t0 = time.Now()
		if code := call(b, "POST", s.base+"/sandboxes", s.key, `{"templateID":"`+snap.SnapshotID+`","timeout":300}`, &cp); code != http.StatusCreated {
			b.Fatalf("create from a snapshot at %s: %d", s.base, code)
		}
		s.restore.Samples = append(s.restore.Samples, time.Since(t0))
		if code := call(b, "DELETE", s.base+"/sandboxes/"+cp.SandboxID, s.key, "", nil); code != http.StatusNoContent {
			b.Fatalf("kill at %s: %d", s.base, code)
		}
		if code := call(b, "DELETE", s.base+"/templates/"+snap.SnapshotID, s.key, "", nil); code != http.StatusNoContent {
			b.Fatalf("deleteSnapshot at %s: %d", s.base, code)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range sides {
			round(sides[(i+j)%len(sides)], i)
		}
	}
	b.StopTimer()
	for i, s := range sides {
		where := [...]string{"gateway", "node"}[i]
		for _, sr := range []*series.Series{&s.snap, &s.restore} {
			b.Logf("%-40s p50 %4d ms  p99 %4d ms", sr.Name, sr.Quantile(0.5).Milliseconds(), sr.Quantile(0.99).Milliseconds())
			what := strings.Fields(sr.Name)[0]
			b.ReportMetric(float64(sr.Quantile(0.5).Milliseconds()), what+"-"+where+"-p50-ms")
			b.ReportMetric(float64(sr.Quantile(0.99).Milliseconds()), what+"-"+where+"-p99-ms")
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average: %s", strings.TrimSpace(string(load)))
}
