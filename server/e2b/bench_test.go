package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testmgr"
)

// sdkCommand is what the SDK's commands.run(cmd) asks envd to start.
var sdkCommand = sandbox.Process{Args: []string{"/bin/bash", "-l", "-c", "true"}}

// BenchmarkSDK measures create + commands.run('true'), and
// commands.run('true') alone, through the real e2b SDK against the E2B
// handler on a loopback listener, and the same operations on the Manager
// directly, in one run; and files.write alone against files.write until a
// watchDir sees it. b.N is the sample count of each series:
//
//	go test -run X -bench SDK -benchtime 20x ./e2b
func BenchmarkSDK(b *testing.B) {
	node, npm := nodeTools(b)
	installSDK(b, npm)
	env := testmgr.New(b)
	m := env.Manager
	s := newServerOn(b, env)
	ctx := context.Background()
	n := b.N

	direct := bench.Series{Name: "direct: Manager.Create + Exec(bash -l -c true)"}
	directExec := bench.Series{Name: "direct: Manager.Exec(bash -l -c true)"}
	// Half the direct samples before the SDK's, half after, so that the
	// machine's drifting load weighs on both paths alike.
	measureDirect := func(n int) {
		for range n {
			t := time.Now()
			sb, err := m.Create(ctx, sandbox.CreateOptions{Image: sandbox.DefaultImage, Start: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Exec(ctx, sb.ID, sdkCommand, sandbox.Stdio{}); err != nil {
				b.Fatal(err)
			}
			direct.Samples = append(direct.Samples, time.Since(t))
			t = time.Now() // and again, on the sandbox now warm
			if _, err := m.Exec(ctx, sb.ID, sdkCommand, sandbox.Stdio{}); err != nil {
				b.Fatal(err)
			}
			directExec.Samples = append(directExec.Samples, time.Since(t))
			m.Remove(ctx, sb.ID, true)
		}
	}
	measureDirect(n / 2)

	cmd := exec.Command(node, "bench.mjs")
	cmd.Dir = compatDir()
	cmd.Env = append(s.sdkEnv(), "SMOLVM_BENCH_N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("bench.mjs: %v", err)
	}
	measureDirect(n - n/2)
	var res struct{ CreateRun, Exec, Write, Watched []float64 }
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("bench.mjs printed %q: %v", out, err)
	}
	viaSDK := bench.Series{Name: "e2b SDK: Sandbox.create + commands.run('true')", Samples: millis(res.CreateRun)}
	sdkExec := bench.Series{Name: "e2b SDK: commands.run('true')", Samples: millis(res.Exec)}
	sdkWrite := bench.Series{Name: "e2b SDK: files.write", Samples: millis(res.Write)}
	sdkWatched := bench.Series{Name: "e2b SDK: files.write until watchDir sees it", Samples: millis(res.Watched)}
	bench.Print(os.Stdout, []bench.Series{direct, viaSDK, directExec, sdkExec, sdkWrite, sdkWatched})
	for _, p := range [][2]bench.Series{{viaSDK, direct}, {sdkExec, directExec}} {
		fmt.Printf("SDK overhead at p50, %s: %+.2fms\n", p[0].Name, float64((p[0].Quantile(0.5)-p[1].Quantile(0.5)).Microseconds())/1000)
	}
	b.ReportMetric(float64(viaSDK.Quantile(0.5).Microseconds())/1000, "sdk-create-run-p50-ms")
	b.ReportMetric(float64(viaSDK.Quantile(0.99).Microseconds())/1000, "sdk-create-run-p99-ms")
	b.ReportMetric(float64(sdkExec.Quantile(0.5).Microseconds())/1000, "sdk-run-p50-ms")
	b.ReportMetric(float64(sdkExec.Quantile(0.99).Microseconds())/1000, "sdk-run-p99-ms")
	b.ReportMetric(float64(sdkWatched.Quantile(0.5).Microseconds())/1000, "sdk-write-watched-p50-ms")
}

func millis(ms []float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out
}

// BenchmarkCodeInterpreter measures @e2b/code-interpreter's
// runCode('1+1') on a warm sandbox (a cell in a live interpreter) against
// commands.run('python3 -c "print(1+1)"') (a new process), interleaved
// in one run through the same server. Beside them, the same cell layer by
// layer, to show where runCode's time goes: runCode's request sent with
// node's fetch alone (no SDK), POST /execute through the E2B handler with
// a Go client (no node), the same straight to the
// kernel over the agent (no serve), and GET /health straight to the
// kernel (the agent and the kernel's HTTP, no interpreter). b.N is the
// sample count of each:
//
//	go test -run X -bench CodeInterpreter -benchtime 200x ./server/e2b
func BenchmarkCodeInterpreter(b *testing.B) {
	node, npm := nodeTools(b)
	installSDK(b, npm)
	s := newServer(b)
	ctx := context.Background()
	status, created := s.call(b, "POST", "/v2/sandboxes", apiKey, `{"templateID":"`+e2bapi.CodeInterpreterTemplate+`","timeout":600}`)
	if status != http.StatusCreated {
		b.Fatalf("create: %d %v", status, created)
	}
	id := created["sandboxID"].(string)
	// Straight to the kernel: one kept connection through the agent.
	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return s.env.Manager.DialPort(ctx, id, kernelPort)
	}}}
	defer direct.CloseIdleConnections()
	cell := []byte(`{"code":"1+1"}`)
	timed := func(sr *bench.Series, c *http.Client, method, url string, body []byte, hdr map[string]string) {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatalf("%s: %v", sr.Name, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		sr.Samples = append(sr.Samples, time.Since(start))
		if err != nil || resp.StatusCode != http.StatusOK || (body != nil && !bytes.Contains(out, []byte(`"text": "2"`))) {
			b.Fatalf("%s: %d %s %v", sr.Name, resp.StatusCode, out, err)
		}
	}
	viaHandler := bench.Series{Name: "POST /execute through the E2B handler (Go client)"}
	straight := bench.Series{Name: "POST /execute straight to the kernel over the agent"}
	health := bench.Series{Name: "GET /health straight to the kernel over the agent"}
	handlerHdr := map[string]string{headerSandboxID: id, headerSandboxPort: strconv.Itoa(kernelPort), "X-API-KEY": testKey, "Content-Type": "application/json"}
	lookups := bench.Series{Name: "the port route's lookups (Manager.Get + E2B state)"}
	layers := func(n int) {
		for range n {
			start := time.Now()
			sb, err := s.h.m.Get(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.h.loadInfo(ctx, sb); err != nil {
				b.Fatal(err)
			}
			lookups.Samples = append(lookups.Samples, time.Since(start))
			timed(&viaHandler, http.DefaultClient, "POST", s.URL+"/execute", cell, handlerHdr)
			timed(&straight, direct, "POST", "http://kernel/execute", cell, nil)
			timed(&health, direct, "GET", "http://kernel/health", nil, nil)
		}
	}
	layers(1) // warm the connections
	viaHandler.Samples, straight.Samples, health.Samples, lookups.Samples = nil, nil, nil, nil
	// Half the layers' samples before the SDK's, half after, so that the
	// machine's drifting load weighs on all alike.
	layers(b.N / 2)
	cmd := exec.Command(node, "bench-ci.mjs")
	cmd.Dir = compatDir()
	cmd.Env = append(s.sdkEnv(), "SMOLVM_BENCH_N="+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("bench-ci.mjs: %v", err)
	}
	layers(b.N - b.N/2)
	s.env.Manager.Remove(ctx, id, true)
	var res struct{ RunCode, Commands, Fetch, Health []float64 }
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("bench-ci.mjs printed %q: %v", out, err)
	}
	run := bench.Series{Name: "runCode('1+1')", Baseline: "commands.run('python3 -c ...')", Samples: millis(res.RunCode)}
	base := bench.Series{Name: "commands.run('python3 -c ...')", Samples: millis(res.Commands)}
	fetched := bench.Series{Name: "POST /execute through the E2B handler (node fetch, no SDK)", Samples: millis(res.Fetch)}
	envdHealth := bench.Series{Name: "envd GET /health (node fetch; the handler's lookups, not the sandbox)", Samples: millis(res.Health)}
	bench.Print(os.Stdout, []bench.Series{base, run, fetched, viaHandler, straight, health, envdHealth, lookups})
	b.ReportMetric(float64(run.Quantile(0.5).Microseconds())/1000, "runcode-p50-ms")
	b.ReportMetric(float64(run.Quantile(0.99).Microseconds())/1000, "runcode-p99-ms")
	b.ReportMetric(float64(base.Quantile(0.5).Microseconds())/1000, "commands-p50-ms")
	b.ReportMetric(float64(base.Quantile(0.99).Microseconds())/1000, "commands-p99-ms")
	b.ReportMetric(float64(fetched.Quantile(0.5).Microseconds())/1000, "fetch-p50-ms")
	b.ReportMetric(float64(viaHandler.Quantile(0.5).Microseconds())/1000, "handler-p50-ms")
	b.ReportMetric(float64(straight.Quantile(0.5).Microseconds())/1000, "straight-p50-ms")
	b.ReportMetric(float64(health.Quantile(0.5).Microseconds())/1000, "health-p50-ms")
}

// BenchmarkInterpreterFork measures a fork, through the E2B API, of a
// code interpreter sandbox whose interpreter holds 200 MB of data, and
// the first runCode in the copy (which finds the data there), against the
// same for an idle interpreter, interleaved in one run. b.N is the sample
// count of each series:
//
//	go test -run X -bench InterpreterFork -benchtime 5x ./server/e2b
func BenchmarkInterpreterFork(b *testing.B) {
	s := newServer(b)
	t := b
	ctx := context.Background()
	newInterpreter := func(setup, check string) (id string) {
		status, body := s.call(t, "POST", "/v2/sandboxes", apiKey, `{"templateID":"`+e2bapi.CodeInterpreterTemplate+`","timeout":600}`)
		if status != http.StatusCreated {
			b.Fatalf("create: %d %v", status, body)
		}
		id = body["sandboxID"].(string)
		if text, e := s.runCell(t, id, setup+"\n"+check); e != "" || text == "" {
			b.Fatalf("setup %q: %q %s", setup, text, e)
		}
		return id
	}
	type subject struct {
		name, id, check, want string
		fork, first           bench.Series
	}
	// 200 MiB of bytes that are not zero, so every page is really there.
	const data = "data = bytes(range(256)) * (800 << 10)"
	subjects := []*subject{
		{name: "idle interpreter", check: "x"},
		{name: "interpreter holding 200 MB", check: "len(data)"},
	}
	subjects[0].id = newInterpreter("x = 1", subjects[0].check)
	subjects[1].id = newInterpreter(data, subjects[1].check)
	subjects[0].want, subjects[1].want = "1", strconv.Itoa(200<<20)
	for _, sj := range subjects {
		sj.fork.Name, sj.first.Name = "fork, "+sj.name, "first runCode in the copy, "+sj.name
	}
	for range b.N {
		for _, sj := range subjects {
			start := time.Now()
			id := s.forkOne(t, sj.id)
			sj.fork.Samples = append(sj.fork.Samples, time.Since(start))
			start = time.Now()
			if text, e := s.runCell(t, id, sj.check); text != sj.want || e != "" {
				b.Fatalf("first runCode in a fork of the %s: %q %s, want %s", sj.name, text, e, sj.want)
			}
			sj.first.Samples = append(sj.first.Samples, time.Since(start))
			s.env.Manager.Remove(ctx, id, true)
		}
	}
	idle, full := subjects[0], subjects[1]
	full.fork.Baseline, full.first.Baseline = idle.fork.Name, idle.first.Name
	bench.Print(os.Stdout, []bench.Series{idle.fork, full.fork, idle.first, full.first})
	b.ReportMetric(float64(full.fork.Quantile(0.5).Microseconds())/1000, "fork-200mb-p50-ms")
	b.ReportMetric(float64(full.first.Quantile(0.5).Microseconds())/1000, "first-runcode-200mb-p50-ms")
	b.ReportMetric(float64(idle.fork.Quantile(0.5).Microseconds())/1000, "fork-idle-p50-ms")
	b.ReportMetric(float64(idle.first.Quantile(0.5).Microseconds())/1000, "first-runcode-idle-p50-ms")
}
