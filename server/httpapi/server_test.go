package httpapi_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/client"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/server/httpapi"
	"smolvm.dev/smolvm/tests/fakeruntime"
	"smolvm.dev/smolvm/tests/testmgr"
)

const token = "test-token"

// fixture is a real server (real HTTP on loopback) over a real Manager
// (real runsc), or over the in-memory fake runtime for the handler-level
// tests, and a client for it.
type fixture struct {
	t   *testing.T
	env *testmgr.Env // nil over the fake
	url string
	c   *client.Client
	// spool is the server's upload spool directory.
	spool string
	srv   *httpapi.Server
}

func newFixture(t *testing.T, tune func(*httpapi.Options), mgr ...func(*manager.Config)) *fixture {
	return newFixtureOn(t, func(o *httpapi.Options, _ *testmgr.Env) {
		if tune != nil {
			tune(o)
		}
	}, mgr...)
}

// newFixtureOn is newFixture with tune given the Manager's Env too (to
// mount handlers over its store).
func newFixtureOn(t *testing.T, tune func(*httpapi.Options, *testmgr.Env), mgr ...func(*manager.Config)) *fixture {
	env := testmgr.New(t, mgr...)
	f := serve(t, httpapi.Options{Manager: env.Manager, Images: env.Images, Snapshots: env.Snapshots}, func(o *httpapi.Options) { tune(o, env) })
	f.env = env
	return f
}

// newFakeFixture is newFixture over the fake runtime: no root, no runsc.
func newFakeFixture(t *testing.T, tune func(*httpapi.Options)) *fixture {
	rt := fakeruntime.New(t)
	return serve(t, httpapi.Options{Manager: rt, Images: rt.Images(), Snapshots: rt.Snapshots()}, tune)
}

// serve serves o, with the test's token and spool, tuned by tune (if set).
func serve(t *testing.T, o httpapi.Options, tune func(*httpapi.Options)) *fixture {
	o.Token, o.TempDir = token, t.TempDir()
	if tune != nil {
		tune(&o)
	}
	srv := httpapi.New(o)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, url: hs.URL, c: c, spool: o.TempDir, srv: srv}
}

// do sends a raw request with the token and returns status and body.
func (f *fixture) do(method, path, body string, hdr ...string) (int, []byte, http.Header) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func (f *fixture) create(name string, extra string) *sandbox.Sandbox {
	f.t.Helper()
	code, body, _ := f.do(http.MethodPost, "/v1/sandboxes", `{"name":"`+name+`"`+extra+`}`)
	if code != http.StatusCreated {
		f.t.Fatalf("create %s: %d %s", name, code, body)
	}
	var sb sandbox.Sandbox
	if err := json.Unmarshal(body, &sb); err != nil {
		f.t.Fatal(err)
	}
	return &sb
}

func (f *fixture) sh(ref, script string) (string, string, sandbox.Exit) {
	f.t.Helper()
	var out, errb bytes.Buffer
	exit, err := f.c.Exec(context.Background(), ref, sandbox.Process{Args: []string{"sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		f.t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), exit
}

func apiError(t *testing.T, body []byte) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
		t.Fatalf("not a JSON error: %q", body)
	}
	return e
}

func TestServerSandboxes(t *testing.T) {
	f := newFixture(t, func(o *httpapi.Options) { o.MaxUpload = 1 << 20 })
	ctx := context.Background()

	// Events first, so that the stream sees the creation.
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	events := make(chan sandbox.Event, 64)
	go f.c.Events(evCtx, func(e sandbox.Event) error { events <- e; return nil })

	before := time.Now()
	sb := f.create("box", "")
	if sb.State != sandbox.StateRunning || sb.ExpiresAt == nil || sb.ExpiresAt.Sub(before) < 14*time.Minute || sb.ExpiresAt.Sub(before) > 16*time.Minute {
		t.Fatalf("created %+v: want running with the default 15m TTL", sb)
	}
	waitEvent(t, events, "box", "started")

	t.Run("exec streams stdout, stderr and the exit code", func(t *testing.T) {
		out, errOut, exit := f.sh("box", "echo out; echo err >&2; exit 3")
		if out != "out\n" || errOut != "err\n" || exit.Code != 3 {
			t.Fatalf("%q %q %+v", out, errOut, exit)
		}
		var got bytes.Buffer
		exit, err := f.c.Exec(ctx, "box", sandbox.Process{Args: []string{"no-such-command"}}, sandbox.Stdio{Stdout: &got})
		if err != nil || exit.Code != 127 || exit.Kind != sandbox.KindNotFound {
			t.Fatalf("missing command: %+v %v", exit, err)
		}
		code, body, hdr := f.do(http.MethodPost, "/v1/sandboxes/box/exec", `{"args":["cat"],"stdin":"fed"}`, "Accept", "text/event-stream")
		if code != 200 || hdr.Get("Content-Type") != "text/event-stream" ||
			!strings.Contains(string(body), "event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"fed\"}") ||
			!strings.Contains(string(body), "event: exit\ndata: {\"type\":\"exit\",\"exit\":{\"code\":0}}") {
			t.Fatalf("SSE exec: %d %s %q", code, hdr.Get("Content-Type"), body)
		}
		out, _, _ = f.sh("box", "printf '\\377\\376'")
		if out != "\xff\xfe" {
			t.Fatalf("binary output: %q", out)
		}
	})

	t.Run("client disconnect kills the command", func(t *testing.T) {
		reqCtx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, f.url+"/v1/sandboxes/box/exec",
			strings.NewReader(`{"args":["sh","-c","echo $$; exec sleep 300"]}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ev api.ExecEvent
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &ev) != nil {
			t.Fatalf("first event %q: %v", line, err)
		}
		pid := strings.TrimSpace(ev.Data)
		if _, _, exit := f.sh("box", "kill -0 "+pid); exit.Code != 0 {
			t.Fatalf("sleep %s not running before the disconnect", pid)
		}
		cancel()
		resp.Body.Close()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, _, exit := f.sh("box", "kill -0 "+pid+" 2>/dev/null"); exit.Code != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sleep %s still running 10s after its client left", pid)
			}
		}
	})

	t.Run("pty over websocket with resize", func(t *testing.T) {
		stdinR, stdinW := io.Pipe()
		resize := make(chan sandbox.Size, 1)
		var out syncBuffer
		done := make(chan error, 1)
		var exit sandbox.Exit
		go func() {
			var err error
			exit, err = f.c.Exec(ctx, "box", sandbox.Process{Args: []string{"sh", "-c", "stty size; read line; stty size; echo got $line"}, TTY: true,
				Size: &sandbox.Size{Rows: 30, Cols: 100}}, sandbox.Stdio{Stdin: stdinR, Stdout: &out, Resize: resize})
			done <- err
		}()
		waitFor(t, func() bool { return strings.Contains(out.String(), "30 100") }, "initial size")
		resize <- sandbox.Size{Rows: 40, Cols: 120}
		time.Sleep(200 * time.Millisecond) // the resize travels on its own message
		io.WriteString(stdinW, "hello\n")
		if err := <-done; err != nil || exit.Code != 0 {
			t.Fatalf("tty exec: %v %+v %q", err, exit, out.String())
		}
		if s := out.String(); !strings.Contains(s, "40 120") || !strings.Contains(s, "got hello") {
			t.Fatalf("tty output %q", s)
		}

		// An interactive shell on a terminal, killed by a signal.
		shR, shW := io.Pipe()
		signals := make(chan syscall.Signal, 1)
		var shOut syncBuffer
		go func() {
			var err error
			exit, err = f.c.Exec(ctx, "box", sandbox.Process{Args: []string{"sh"}, TTY: true},
				sandbox.Stdio{Stdin: shR, Stdout: &shOut, Signals: signals})
			done <- err
		}()
		io.WriteString(shW, "tty\n")
		waitFor(t, func() bool { return strings.Contains(shOut.String(), "/dev/pts/") }, "the shell's terminal")
		signals <- syscall.SIGKILL
		select {
		case err := <-done:
			if err != nil || exit.Signal != int(syscall.SIGKILL) {
				t.Fatalf("killed tty exec: %v %+v %q", err, exit, shOut.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the shell outlived its SIGKILL by 10s: %q", shOut.String())
		}
	})

	t.Run("files", func(t *testing.T) {
		if err := f.c.WriteFile(ctx, "box", "/tmp/f", strings.NewReader("data\n")); err != nil {
			t.Fatal(err)
		}
		rc, err := f.c.ReadFile(ctx, "box", "/tmp/f")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "data\n" {
			t.Fatalf("read back %q", got)
		}
		// A file's parents are made, as sandbox.Service's WriteFile says
		// and the manager does directly (smolvm mcp --host relies on it).
		if err := f.c.WriteFile(ctx, "box", "/tmp/new/deeper/f", strings.NewReader("deep")); err != nil {
			t.Fatalf("write under missing parents: %v", err)
		}
		if out, _, _ := f.sh("box", "cat /tmp/new/deeper/f"); out != "deep" {
			t.Fatalf("read back under made parents: %q", out)
		}
		if _, err := f.c.ReadFile(ctx, "box", "/tmp/nope"); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("missing file: %v", err)
		}
		code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/box/files?path=/tmp", "")
		if code != http.StatusBadRequest || !strings.Contains(string(body), "format=tar") {
			t.Fatalf("directory as raw: %d %s", code, body)
		}

		// Over the limit: 413, and nothing at all in the sandbox.
		big := strings.Repeat("x", 1<<20+1)
		code, body, _ = f.do(http.MethodPut, "/v1/sandboxes/box/files?path=/tmp/big", big)
		if e := apiError(t, body); code != http.StatusRequestEntityTooLarge || e.Code != api.CodeTooLarge {
			t.Fatalf("oversized: %d %+v", code, e)
		}
		// Chunked (no Content-Length): refused after reading past the limit.
		req, _ := http.NewRequest(http.MethodPut, f.url+"/v1/sandboxes/box/files?path=/tmp/big", io.MultiReader(strings.NewReader(big)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("oversized chunked: %d", resp.StatusCode)
		}
		if _, _, exit := f.sh("box", "test -e /tmp/big"); exit.Code == 0 {
			t.Fatal("an oversized upload left /tmp/big behind")
		}
		if entries, err := os.ReadDir(f.spool); err != nil || len(entries) != 0 {
			t.Fatalf("spool files left on the host: %v %v", entries, err)
		}

		// Escapes: '..' in the path, and archives that climb out or write
		// through a symlink, are refused and write nothing.
		for _, p := range []string{"../../etc/passwd", "/tmp/../../etc/passwd", "etc/passwd"} {
			if code, body, _ := f.do(http.MethodPut, "/v1/sandboxes/box/files?path="+p, "x"); code != http.StatusBadRequest || apiError(t, body).Field != "path" {
				t.Fatalf("path %q: %d %s", p, code, body)
			}
		}
		for name, entries := range map[string][]tar.Header{
			"dotdot":  {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/../../escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
			"symlink": {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "d/l/escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		} {
			code, body, _ := f.do(http.MethodPut, "/v1/sandboxes/box/files?path=/tmp/up-"+name, tarOf(t, entries), "Content-Type", api.ContentTypeTar)
			if code != http.StatusBadRequest {
				t.Fatalf("%s archive: %d %s", name, code, body)
			}
			if _, _, exit := f.sh("box", "test -e /escaped || test -e /tmp/escaped"); exit.Code == 0 {
				t.Fatalf("%s archive wrote outside its directory", name)
			}
		}
	})

	t.Run("lifetimes: set, expire, and the 404s tell why", func(t *testing.T) {
		code, body, _ := f.do(http.MethodPost, "/v1/sandboxes/box/timeout", `{"timeout":"1h"}`)
		var got sandbox.Sandbox
		if json.Unmarshal(body, &got); code != 200 || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 59*time.Minute {
			t.Fatalf("set timeout: %d %s", code, body)
		}
		f.create("brief", `,"timeout":"1s"`)
		var e api.Error
		waitFor(t, func() bool {
			code, body, _ := f.do(http.MethodGet, "/v1/sandboxes/brief", "")
			if code != http.StatusNotFound {
				return false
			}
			e = apiError(t, body)
			return true
		}, "expiry")
		if e.Code != api.CodeExpired || e.ExpiredAt == nil || !strings.Contains(e.Message, "expired at "+e.ExpiredAt.UTC().Format(time.RFC3339)) {
			t.Fatalf("expired: %+v", e)
		}
		waitEvent(t, events, "brief", "expired")
		_, err := f.c.Get(ctx, "brief")
		if !errors.Is(err, client.ErrExpired) || errors.Is(err, client.ErrNotFound) {
			t.Fatalf("client error for expired: %v", err)
		}
		code, body, _ = f.do(http.MethodGet, "/v1/sandboxes/ghost", "")
		if e := apiError(t, body); code != http.StatusNotFound || e.Code != api.CodeNotFound || !strings.Contains(e.Message, "never existed") {
			t.Fatalf("unknown: %d %+v", code, e)
		}
		if _, err := f.c.Get(ctx, "ghost"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrExpired) {
			t.Fatalf("client error for unknown: %v", err)
		}
		// A listed expired sandbox is in the list, with its state.
		list, err := f.c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range list {
			found = found || s.Name == "brief" && s.State == sandbox.StateExpired
		}
		if !found {
			t.Fatalf("expired sandbox not listed: %+v", list)
		}
	})

	t.Run("logs, stats, images", func(t *testing.T) {
		f.create("talker", `,"cmd":["sh","-c","echo hi; echo oops >&2"]`)
		var out, errb bytes.Buffer
		if err := f.c.Logs(ctx, "talker", sandbox.LogOptions{Follow: true, Stdout: &out, Stderr: &errb}); err != nil {
			t.Fatal(err)
		}
		if out.String() != "hi\n" || errb.String() != "oops\n" {
			t.Fatalf("logs %q %q", out.String(), errb.String())
		}
		st, err := f.c.Stats(ctx, "box")
		if err != nil || st.MemoryLimit != sandbox.DefaultMemory {
			t.Fatalf("stats %+v %v", st, err)
		}
		imgs, err := f.c.Images(ctx)
		if err != nil || len(imgs) == 0 || imgs[0].Refs[0] != sandbox.DefaultImage {
			t.Fatalf("images %+v %v", imgs, err)
		}
	})

	t.Run("stop, remove, and what a lookup says after", func(t *testing.T) {
		code, body, _ := f.do(http.MethodDelete, "/v1/sandboxes/box", "")
		if e := apiError(t, body); code != http.StatusConflict || e.Code != api.CodeConflict {
			t.Fatalf("rm running without force: %d %+v", code, e)
		}
		if _, err := f.c.Stop(ctx, "box", time.Second); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Remove(ctx, "box", false); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, events, "box", "removed")
		code, body, _ = f.do(http.MethodGet, "/v1/sandboxes/box", "")
		if e := apiError(t, body); code != http.StatusNotFound || !strings.Contains(e.Message, "was removed at") {
			t.Fatalf("after rm: %d %+v", code, e)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		code, body, _ := f.do(http.MethodGet, "/metrics", "")
		m := string(body)
		for _, want := range []string{
			`smolvm_sandboxes{state="expired"} 1`,
			`smolvm_api_requests_total{route="POST /v1/sandboxes",code="201"} 3`,
			`smolvm_api_errors_total{route="PUT /v1/sandboxes/{id}/files",code="413"} 2`,
			`smolvm_api_request_duration_seconds_bucket{route="POST /v1/sandboxes/{id}/exec",le="+Inf"}`,
		} {
			if code != 200 || !strings.Contains(m, want) {
				t.Errorf("metrics lack %q:\n%s", want, m)
			}
		}
	})
}

func TestServerSnapshots(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.create("src", "")
	f.sh("src", "echo kept > /root/state")
	snap, err := f.c.Checkpoint(ctx, "src", sandbox.CheckpointOptions{Name: "snap1"})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := f.c.Restore(ctx, "snap1", sandbox.RestoreOptions{Name: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := f.sh(restored.Name, "cat /root/state"); out != "kept\n" || restored.Snapshot != snap.ID {
		t.Fatalf("restored: %q %+v", out, restored)
	}
	forks, err := f.c.Fork(ctx, "src", sandbox.ForkOptions{N: 2, NamePrefix: "kid"})
	if err != nil || len(forks) != 2 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	for _, k := range forks {
		if out, _, _ := f.sh(k.ID, "cat /root/state"); out != "kept\n" || k.ForkedFrom == "" {
			t.Fatalf("fork %s: %q %+v", k.Name, out, k)
		}
	}
	// n defaults to 1 when absent; 0 copies is refused as -1 and 65 are.
	for _, n := range []int{0, -1, sandbox.MaxFork + 1} {
		if _, err := f.c.Fork(ctx, "src", sandbox.ForkOptions{N: n}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("fork of %d copies: %v", n, err)
		}
	}
	if status, body, _ := f.do("POST", "/v1/sandboxes/src/fork", `{"n":0}`); status != http.StatusBadRequest || !strings.Contains(string(body), "between 1 and 64") {
		t.Errorf(`fork {"n":0}: %d %s`, status, body)
	}
	var one []sandbox.Sandbox
	if status, body, _ := f.do("POST", "/v1/sandboxes/src/fork", `{}`); status != http.StatusCreated || json.Unmarshal(body, &one) != nil || len(one) != 1 {
		t.Errorf("fork {}: %d %s; want one copy", status, body)
	}
	if sb, err := f.c.Pause(ctx, "src"); err != nil || sb.State != sandbox.StatePaused || sb.ExpiresAt != nil {
		t.Fatalf("pause: %+v %v", sb, err)
	}
	if sb, err := f.c.Resume(ctx, "src"); err != nil || sb.State != sandbox.StateRunning || sb.ExpiresAt == nil {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	snaps, err := f.c.Snapshots(ctx)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots: %v %v", snaps, err)
	}
	if err := f.c.RemoveSnapshot(ctx, "snap1"); !errors.Is(err, sandbox.ErrState) {
		t.Fatalf("rm of a snapshot in use: %v", err)
	}
	if err := f.c.Remove(ctx, "copy", true); err != nil {
		t.Fatal(err)
	}
	if err := f.c.RemoveSnapshot(ctx, "snap1"); err != nil {
		t.Fatalf("rm of an unused snapshot: %v", err)
	}
	if _, err := f.c.Restore(ctx, "snap1", sandbox.RestoreOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("restore of a removed snapshot: %v", err)
	}
}

func waitEvent(t *testing.T, c <-chan sandbox.Event, name, typ string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-c:
			if e.Name == name && e.Type == typ {
				return
			}
		case <-timeout:
			t.Fatalf("no %s event for %s", typ, name)
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func tarOf(t *testing.T, hdrs []tar.Header) string {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return b.String()
}

func TestServerPools(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	p, err := f.c.CreatePool(ctx, api.PoolRequest{Name: "warm", Size: 1, Fill: true})
	if err != nil || p.Ready != 1 {
		t.Fatalf("pool: %+v %v", p, err)
	}
	sb := f.create("from-pool", `,"pool":"warm","timeout":"1h"`)
	if sb.State != sandbox.StateRunning || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 59*time.Minute {
		t.Fatalf("from the pool: %+v", sb)
	}
	if out, _, exit := f.sh("from-pool", "echo $SMOLVM_SANDBOX_NAME"); out != "from-pool\n" || exit.Code != 0 {
		t.Fatalf("pooled sandbox's identity: %q %+v", out, exit)
	}
	if p, err := f.c.FillPool(ctx, "warm"); err != nil || p.Ready != 1 {
		t.Fatalf("refill: %+v %v", p, err)
	}
	if pools, err := f.c.Pools(ctx); err != nil || len(pools) != 1 {
		t.Fatalf("pools: %+v %v", pools, err)
	}
	// Restore targets: a fork of the pooled sandbox goes into one.
	if _, err := f.c.CreatePool(ctx, api.PoolRequest{Name: "none"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("pool with no size and no targets: %v", err)
	}
	tp, err := f.c.CreatePool(ctx, api.PoolRequest{Name: "forks", Targets: 1, Fill: true})
	if err != nil || tp.TargetsReady != 1 || tp.Ready != 0 {
		t.Fatalf("targets pool: %+v %v", tp, err)
	}
	copies, err := f.c.Fork(ctx, "from-pool", sandbox.ForkOptions{N: 1, NamePrefix: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := f.sh("c-1", "hostname"); out != "c-1\n" || len(copies) != 1 {
		t.Fatalf("a fork into a target has hostname %q", out)
	}
	if tp, err := f.c.FillPool(ctx, "forks"); err != nil || tp.TargetsReady != 1 {
		t.Fatalf("refill targets: %+v %v", tp, err)
	}
	if err := f.c.RemovePool(ctx, "forks"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.RemovePool(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.RemovePool(ctx, "warm"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("rm of a removed pool: %v", err)
	}
}
