package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/cmd/smolvm/bench"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/server/ports"
	"smolvm.dev/smolvm/tests/testimage"
	"smolvm.dev/smolvm/tests/testmgr"
)

// BenchmarkTemplateFirstAnswer measures, through the native API, a
// sandbox's create until the first HTTP answer of its server through
// serve's port route, for a server that takes 2 s to listen: created from
// a template of it (a restore of its started state; one GET, which must
// answer) and, as the baseline in the same run, from the image with the
// server as its command (GETs every 10 ms until one answers). Removal is
// not timed. A third series creates from a template with hot copies
// (--hot 1), claiming a restored, paused one; a fourth from the template
// with a restore target waiting in a pool of its image. It prints p50/p99 of each
// and the load average.
//
//	go test -run X -bench TemplateFirstAnswer -benchtime 10x ./server/httpapi
func BenchmarkTemplateFirstAnswer(b *testing.B) {
	env := testmgr.New(b)
	ctx := context.Background()
	start := testimage.SlowServer(8080, 2*time.Second)
	for _, o := range []sandbox.TemplateOptions{{Name: "slow-web"}, {Name: "slow-web-hot", Hot: 1}} {
		o.Start, o.Ready = start, sandbox.Ready{Port: 8080}
		if _, err := env.Manager.BuildTemplate(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	proxy := ports.New(env.Manager.DialPort)
	b.Cleanup(proxy.Close)
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Manager: env.Manager, Token: "bench", TempDir: b.TempDir(), Ports: proxy}))
	b.Cleanup(hs.Close)
	c, err := client.New(hs.URL, "bench")
	if err != nil {
		b.Fatal(err)
	}
	// firstAnswer GETs / of port 8080 in id until it answers 200; without
	// retry, the first GET must.
	firstAnswer := func(id string, retry bool) error {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			resp, err := http.DefaultClient.Do(mustReq(hs.URL+"/v1/sandboxes/"+id+"/ports/8080/", "Authorization", "Bearer bench"))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				err = fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			}
			if !retry || time.Now().After(deadline) {
				return err
			}
		}
	}
	var created []time.Duration // of the template's: until create returned
	measure := func(o sandbox.CreateOptions, retry bool) time.Duration {
		t := time.Now()
		sb, err := c.Create(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		if !retry {
			created = append(created, time.Since(t))
		}
		if err := firstAnswer(sb.ID, retry); err != nil {
			b.Fatalf("the first answer of %s: %v", sb.Name, err)
		}
		d := time.Since(t)
		if err := c.Remove(ctx, sb.ID, true); err != nil {
			b.Fatal(err)
		}
		return d
	}
	plain := bench.Series{Name: "create of the image running the server, GET until it answers"}
	tmpl := bench.Series{Name: "create from the template, first GET", Baseline: plain.Name}
	// A template with hot copies (--hot 1): a create claims a restored,
	// paused copy. The pool is filled before each claim, untimed, and left
	// to settle (AGENTS.md: a hot copy claimed at once is slower).
	hot := bench.Series{Name: "create from the template with --hot 1, first GET", Baseline: plain.Name}
	hotTmpl, err := env.Manager.Template(ctx, "slow-web-hot")
	if err != nil {
		b.Fatal(err)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	for b.Loop() {
		tmpl.Samples = append(tmpl.Samples, measure(sandbox.CreateOptions{Image: "slow-web", Start: true}, false))
		plain.Samples = append(plain.Samples, measure(sandbox.CreateOptions{Start: true, Config: sandbox.Config{Cmd: start}}, true))
	}
	n := len(created)
	for range n {
		if _, err := env.Manager.FillPool(ctx, hotTmpl.HotPool()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		hot.Samples = append(hot.Samples, measure(sandbox.CreateOptions{Image: "slow-web-hot", Start: true}, false))
	}
	// A pool of restore targets of the template's image: the restore
	// goes into a sandbox created ahead (runsc create done), as a fork
	// into a target does. The pool is refilled before each, untimed.
	targets := bench.Series{Name: "create from the template, a restore target waiting, first GET", Baseline: plain.Name}
	plainTmpl, err := env.Manager.Template(ctx, "slow-web")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := env.Manager.CreatePool(ctx, sandbox.PoolOptions{Name: "slow-web-targets", Image: plainTmpl.Image, Targets: 1}); err != nil {
		b.Fatal(err)
	}
	for range n {
		if p, err := env.Manager.Pool(ctx, "slow-web-targets"); err != nil || p.TargetsReady != 1 {
			if _, err := env.Manager.FillPool(ctx, "slow-web-targets"); err != nil {
				b.Fatal(err)
			}
		}
		if p, err := env.Manager.Pool(ctx, "slow-web-targets"); err != nil || p.TargetsReady != 1 {
			b.Fatalf("no restore target waiting: %+v %v", p, err)
		}
		time.Sleep(time.Second)
		targets.Samples = append(targets.Samples, measure(sandbox.CreateOptions{Image: "slow-web", Start: true}, false))
		if p, err := env.Manager.Pool(ctx, "slow-web-targets"); err != nil || p.TargetsReady != 0 {
			b.Fatalf("the create took no restore target: %+v %v", p, err)
		}
	}
	after, _ := os.ReadFile("/proc/loadavg")
	bench.Print(os.Stdout, []bench.Series{plain, tmpl, {Name: "  of which the template's create (a restore)", Samples: created[:n]}, hot, targets})
	fmt.Printf("load average before: %s, after: %s\n", strings.TrimSpace(string(load)), strings.TrimSpace(string(after)))
	report(b, "template-", tmpl.Samples)
	report(b, "plain-", plain.Samples)
	report(b, "hot-", hot.Samples)
	report(b, "targets-", targets.Samples)
}
