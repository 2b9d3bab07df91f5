package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
)

// StartAPI serves the HTTP API for m on a Unix socket in dir, with a
// token, and returns a client for it and a function that stops it. The
// load generator is the client, on the same machine, over loopback.
func StartAPI(m *manager.Manager, dir string) (*client.Client, func(), error) {
	sock := filepath.Join(dir, "bench-api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	const token = "bench"
	// The benchmark's own concurrency must not hit the limiter.
	hs := &http.Server{Handler: httpapi.New(httpapi.Options{Manager: m, Token: token, TempDir: dir, MaxInFlight: 1024})}
	go hs.Serve(ln)
	c, err := client.New("unix://"+sock, token)
	if err != nil {
		hs.Close()
		return nil, nil, err
	}
	return c, func() { hs.Close() }, nil
}

var trueCmd = sandbox.Process{Args: []string{"true"}}

// ExecPair times one `true` through the API and one through the Manager
// directly, back to back, so that both see the same machine load.
func ExecPair(ctx context.Context, c *client.Client, m *manager.Manager, id string) (viaAPI, direct time.Duration, err error) {
	t := time.Now()
	if exit, err := c.Exec(ctx, id, trueCmd, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		return 0, 0, fmt.Errorf("exec through the API: %v %+v", err, exit)
	}
	viaAPI = time.Since(t)
	t = time.Now()
	if exit, err := m.Exec(ctx, id, trueCmd, sandbox.Stdio{}); err != nil || exit.Code != 0 {
		return 0, 0, fmt.Errorf("exec: %v %+v", err, exit)
	}
	return viaAPI, time.Since(t), nil
}

// streamingCmd prints 100 lines, so each exec streams output events.
var streamingCmd = sandbox.Process{Args: []string{"sh", "-c", "i=0; while [ $i -lt 100 ]; do echo line $i; i=$((i+1)); done"}}

// Execer runs a command in sandbox id: a *client.Client's or a
// *manager.Manager's Exec.
type Execer func(ctx context.Context, id string, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error)

// ConcurrentExecs starts n streaming execs at once with exec and returns
// each one's latency and the wall time for all of them.
func ConcurrentExecs(ctx context.Context, exec Execer, id string, n int) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			t := time.Now()
			var out bytes.Buffer
			exit, err := exec(ctx, id, streamingCmd, sandbox.Stdio{Stdout: &out})
			lat[i] = time.Since(t)
			if err == nil && (exit.Code != 0 || bytes.Count(out.Bytes(), []byte("\n")) != 100) {
				err = fmt.Errorf("exit %+v, %d lines", exit, bytes.Count(out.Bytes(), []byte("\n")))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return lat, time.Since(start), errors.Join(errs...)
}

// CreateViaAPI times creating and starting a sandbox through the API (its
// removal is not timed).
func CreateViaAPI(ctx context.Context, c *client.Client) (time.Duration, error) {
	t := time.Now()
	sb, err := c.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{TTL: sandbox.DefaultTTL}})
	if err != nil {
		return 0, err
	}
	d := time.Since(t)
	return d, c.Remove(context.WithoutCancel(ctx), sb.ID, true)
}

// APIOptions configure RunAPI.
type APIOptions struct {
	Manager *manager.Manager
	Dir     string
	// Exec is how many exec pairs; Creates how many creates; Concurrent
	// how many streaming execs run at once (in 3 rounds).
	Exec, Creates, Concurrent int
}

// RunAPI measures the HTTP API against the Manager in the same run.
func RunAPI(ctx context.Context, o APIOptions) ([]Series, error) {
	c, stop, err := StartAPI(o.Manager, o.Dir)
	if err != nil {
		return nil, err
	}
	defer stop()
	sb, err := o.Manager.Create(ctx, sandbox.CreateOptions{Start: true})
	if err != nil {
		return nil, err
	}
	defer o.Manager.Remove(context.WithoutCancel(ctx), sb.ID, true)
	viaAPI := Series{Name: "exec true (HTTP API)", Baseline: "exec true (Go API, same run)"}
	direct := Series{Name: "exec true (Go API, same run)"}
	for range o.Exec {
		a, d, err := ExecPair(ctx, c, o.Manager, sb.ID)
		if err != nil {
			return nil, err
		}
		viaAPI.Samples, direct.Samples = append(viaAPI.Samples, a), append(direct.Samples, d)
	}
	series := []Series{viaAPI, direct}
	if o.Concurrent > 0 {
		const rounds = 3
		viaAPI := Series{Baseline: "direct"}
		direct := Series{}
		var apiWall, directWall time.Duration
		for range rounds {
			lat, w, err := ConcurrentExecs(ctx, c.Exec, sb.ID, o.Concurrent)
			if err != nil {
				return nil, err
			}
			viaAPI.Samples, apiWall = append(viaAPI.Samples, lat...), apiWall+w
			if lat, w, err = ConcurrentExecs(ctx, o.Manager.Exec, sb.ID, o.Concurrent); err != nil {
				return nil, err
			}
			direct.Samples, directWall = append(direct.Samples, lat...), directWall+w
		}
		rate := func(wall time.Duration) float64 { return float64(rounds*o.Concurrent) / wall.Seconds() }
		direct.Name = fmt.Sprintf("%d concurrent streaming execs (Go API): %.0f execs/s", o.Concurrent, rate(directWall))
		viaAPI.Name = fmt.Sprintf("%d concurrent streaming execs (HTTP API): %.0f execs/s", o.Concurrent, rate(apiWall))
		viaAPI.Baseline = direct.Name
		series = append(series, viaAPI, direct)
	}
	if o.Creates > 0 {
		create := Series{Name: "create+start (HTTP API)"}
		for range o.Creates {
			d, err := CreateViaAPI(ctx, c)
			if err != nil {
				return nil, err
			}
			create.Samples = append(create.Samples, d)
		}
		series = append(series, create)
	}
	return series, nil
}
