package browser_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/browser"
)

// pagePort serves the test's pages on the fake internet (allowed.test and,
// refused by the policy, other.test).
const pagePort = 8088

// world is a closed network with a page server, a Manager whose sandboxes
// live in it, and a golden browser allowed to reach allowed.test only.
type world struct {
	net  *nettest.World
	mgr  *manager.Manager
	dial browser.Dialer
	// golden is how long browser.Start took (boot, warm-up, checkpoint).
	golden time.Duration
}

func newWorld(t testing.TB) *world {
	t.Helper()
	testenv.Runsc(t)
	if _, err := os.Stat(browser.Chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("chromium not installed (apt-get install chromium)")
	}
	return openWorld(t, func(*testmgr.Env) string { return "" })
}

// openWorld is newWorld with the golden in the image that image puts in
// the Manager's store ("": the host image).
func openWorld(t testing.TB, image func(*testmgr.Env) string) *world {
	t.Helper()
	w := nettest.New(t)
	env := testmgr.New(t, func(c *manager.Config) { c.Network = w.Host(testenv.Smolvm(t)) })
	servePages(t, w.InternetNS, nettest.Internet4)
	img := image(env)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dial := env.Manager.DialPublished
	t0 := time.Now()
	_, err := browser.Start(ctx, env.Manager, browser.StartOptions{
		Image:   img,
		Network: sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}},
		Dial:    dial,
		// A cold Chromium took over a minute at load 60.
		Timeout: 150 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &world{net: w, mgr: env.Manager, dial: dial, golden: time.Since(t0)}
}

// pageColour is the colour of /page/N's block.
func pageColour(n int) color.RGBA { return color.RGBA{uint8(20 * n), 160, uint8(250 - 20*n), 255} }

// servePages serves /page/N: a white page with a 200×100 block of
// pageColour(N) at its top left corner.
func servePages(t testing.TB, ns, ip string) {
	ln := nettest.Listen(t, ns, net.JoinHostPort(ip, strconv.Itoa(pagePort)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/page/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, pageHTML(n))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// pageHTML is /page/N.
func pageHTML(n int) string {
	c := pageColour(n)
	return fmt.Sprintf(`<!doctype html><title>page %d</title><style>body{margin:0;background:#fff}
#b{position:absolute;left:0;top:0;width:200px;height:100px;background:rgb(%d,%d,%d)}</style><div id=b></div>`, n, c.R, c.G, c.B)
}

func pageURL(host string, n int) string {
	return fmt.Sprintf("http://%s:%d/page/%d", host, pagePort, n)
}

// checkShot decodes a PNG and checks page n's block and the white page
// around it.
func checkShot(t *testing.T, b []byte, n int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("page %d: screenshot is no PNG: %v", n, err)
	}
	at := func(x, y int) color.RGBA {
		r, g, b, _ := img.At(x, y).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}
	}
	if got, want := at(100, 50), pageColour(n); !near(got, want) {
		t.Errorf("page %d: pixel (100,50) is %v, want the block's %v", n, got, want)
	}
	if got := at(400, 300); !near(got, color.RGBA{255, 255, 255, 255}) {
		t.Errorf("page %d: pixel (400,300) is %v, want white", n, got)
	}
	if bd := img.Bounds(); bd.Dx() < 400 || bd.Dy() < 300 {
		t.Errorf("page %d: screenshot is %v", n, bd)
	}
}

func near(a, b color.RGBA) bool {
	d := func(x, y uint8) int { return max(int(x)-int(y), int(y)-int(x)) }
	return d(a.R, b.R) <= 3 && d(a.G, b.G) <= 3 && d(a.B, b.B) <= 3
}

func browserTestDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "sdk", "browser-test")
}

// playwrightCore returns node and sdk/browser-test, with playwright-core
// installed there.
func playwrightCore(t testing.TB) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is required in CI")
		}
		t.Skip("node not installed")
	}
	dir = browserTestDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return node, dir
}

// playwright runs sdk/browser-test/cdp.mjs in the test's host namespace,
// where browsers' ports are published.
func (w *world) playwright(t *testing.T, cdp, page, mode, shot string) (r struct {
	Cookies []string
	Storage *string
	Title   string
}) {
	t.Helper()
	node, dir := playwrightCore(t)
	args := []string{"--net=" + w.net.HostNS, node, "cdp.mjs", cdp, page, mode}
	if shot != "" {
		args = append(args, shot)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("playwright %s %s: %v\n%s", page, mode, err, out)
	}
	if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &r); err != nil {
		t.Fatalf("playwright output: %v\n%s", err, out)
	}
	return r
}

// onePage checks that b has one target, the page about:blank, as the
// golden left it: no other page, and none of Chromium's preloaded browser
// UI (the omnibox popups, which cost a renderer and the slowest steps of
// Playwright's connectOverCDP).
func (w *world) onePage(t *testing.T, b *browser.Browser) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: w.dial}}
	resp, err := hc.Get(b.HTTP + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var targets []struct{ Type, URL string }
	if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].Type != "page" || targets[0].URL != "about:blank" {
		t.Errorf("a new browser's targets: %+v, want one page at about:blank", targets)
	}
}

// TestBrowser runs real Chromium in real sandboxes: Playwright over CDP,
// isolation between forks, ten forks at once, the network policy, and a
// fork whose Chromium dies.
func TestBrowser(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	newBrowser := func(t *testing.T) *browser.Browser {
		t.Helper()
		b, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { browser.Release(ctx, w.mgr, b.ID) })
		return b
	}

	var first *browser.Browser
	t.Run("PlaywrightIsolation", func(t *testing.T) {
		first = newBrowser(t)
		if !strings.HasPrefix(first.CDP, "ws://127.0.0.1:") || !strings.Contains(first.CDP, "/devtools/browser/") {
			t.Errorf("CDP URL %q", first.CDP)
		}
		// Playwright's connectOverCDP waits for every page to commit a
		// navigation: a golden caught with Chromium's New Tab page still
		// navigating made it hang. A browser has the golden's one page.
		w.onePage(t, first)
		// Two CPUs unless the golden asked otherwise: a run is CPU-bound.
		sb, err := w.mgr.Get(ctx, first.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(browser.DefaultCPUs, float64(runtime.NumCPU())); sb.Config.Limits.CPUs != want {
			t.Errorf("browser's limits: %+v, want %g CPUs", sb.Config.Limits, want)
		}
		shot := filepath.Join(t.TempDir(), "shot.png")
		r := w.playwright(t, first.CDP, pageURL("allowed.test", 3), "set", shot)
		if r.Title != "page 3" || len(r.Cookies) != 1 || r.Cookies[0] != "run=first" || r.Storage == nil || *r.Storage != "first" {
			t.Errorf("first browser after setting state: %+v", r)
		}
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		checkShot(t, b, 3)

		// The first browser still runs, with its cookie; a second one,
		// from the same golden, has neither cookie nor storage.
		second := newBrowser(t)
		if second.CDP == first.CDP {
			t.Fatalf("two browsers share %s", first.CDP)
		}
		w.onePage(t, second)
		r = w.playwright(t, second.CDP, pageURL("allowed.test", 3), "read", "")
		if r.Title != "page 3" || len(r.Cookies) != 0 || r.Storage != nil {
			t.Errorf("second browser sees the first one's state: %+v", r)
		}
		r = w.playwright(t, first.CDP, pageURL("allowed.test", 3), "read", "")
		if len(r.Cookies) != 1 || r.Storage == nil {
			t.Errorf("first browser lost its own state: %+v", r)
		}
	})

	t.Run("TenInParallel", func(t *testing.T) {
		var wg sync.WaitGroup
		shots := make([][]byte, 10)
		errs := make([]error, 10)
		for i := range 10 {
			wg.Go(func() {
				b, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial, Timeout: 2 * time.Minute})
				if err != nil {
					errs[i] = err
					return
				}
				defer browser.Release(ctx, w.mgr, b.ID)
				shots[i], errs[i] = browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", i), Width: 800, Height: 600, Dial: w.dial, Timeout: 2 * time.Minute})
			})
		}
		wg.Wait()
		for i := range 10 {
			if errs[i] != nil {
				t.Errorf("browser %d: %v", i, errs[i])
				continue
			}
			checkShot(t, shots[i], i)
		}
	})

	t.Run("PolicyDenies", func(t *testing.T) {
		b := newBrowser(t)
		_, err := browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: pageURL("other.test", 1), Dial: w.dial})
		if !errors.Is(err, browser.ErrLoad) || !strings.Contains(err.Error(), "ERR_NAME_NOT_RESOLVED") {
			t.Errorf("a page the policy refuses: %v, want ErrLoad with ERR_NAME_NOT_RESOLVED", err)
		}
		var evs []sandbox.NetworkEvent
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(evs) == 0; time.Sleep(100 * time.Millisecond) {
			if evs, err = w.mgr.NetEvents(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		found := false
		for _, ev := range evs {
			found = found || ev.Name == "other.test."
		}
		if !found {
			t.Errorf("deny log has no other.test.: %+v", evs)
		}
		// The allowed page still loads in the same browser.
		png, err := browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", 2), Dial: w.dial})
		if err != nil {
			t.Fatal(err)
		}
		checkShot(t, png, 2)
		// A data: URL carries its page; no server is asked.
		png, err = browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: "data:text/html;base64," + base64.StdEncoding.EncodeToString([]byte(pageHTML(3))), Dial: w.dial})
		if err != nil {
			t.Fatal(err)
		}
		checkShot(t, png, 3)
	})

	t.Run("KilledChromium", func(t *testing.T) {
		victim, other := newBrowser(t), newBrowser(t)
		var out bytes.Buffer
		exit, err := w.mgr.Exec(ctx, victim.ID, sandbox.Process{Args: []string{"pkill", "-9", "-x", "chromium"}}, sandbox.Stdio{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("pkill chromium: %v", err)
		}
		// Chromium is the sandbox's main process: the sandbox may stop
		// before pkill's own exit is reported, which ends that exec.
		if exit.Code != 0 {
			if sb, err := w.mgr.Get(ctx, victim.ID); err != nil || sb.State == sandbox.StateRunning {
				t.Fatalf("pkill chromium: %+v %s, and the sandbox is %+v (%v)", exit, out.String(), sb, err)
			}
		}
		if _, err := browser.Screenshot(ctx, victim.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", 1), Dial: w.dial, Timeout: 5 * time.Second}); err == nil {
			t.Error("a browser whose Chromium was killed still took a screenshot")
		}
		png, err := browser.Screenshot(ctx, other.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", 4), Dial: w.dial})
		if err != nil {
			t.Fatalf("the other browser: %v", err)
		}
		checkShot(t, png, 4)
		// The golden is untouched: a new browser works.
		png, err = browser.Capture(ctx, w.mgr, browser.DefaultGolden, browser.ScreenshotOptions{URL: pageURL("allowed.test", 5), Dial: w.dial})
		if err != nil {
			t.Fatalf("a new browser after the kill: %v", err)
		}
		checkShot(t, png, 5)
	})

	t.Run("HotPool", func(t *testing.T) {
		// Copies of the golden restored ahead of time, each with its
		// own network and DevTools port: browser new claims one.
		if _, err := w.mgr.CreatePool(ctx, sandbox.PoolOptions{Name: "browsers", From: browser.DefaultGolden, Hot: 2}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.mgr.RemovePool(ctx, "browsers") })
		if _, err := w.mgr.FillPool(ctx, "browsers"); err != nil {
			t.Fatal(err)
		}
		var got []*browser.Browser
		for n := range 2 {
			if p, err := w.mgr.Pool(ctx, "browsers"); err != nil || p.HotReady != 2-n {
				t.Fatalf("pool before claim %d: %+v %v, want %d waiting", n, p, err, 2-n)
			}
			t0 := time.Now()
			b := newBrowser(t)
			t.Logf("browser new from the hot pool: %v", time.Since(t0))
			got = append(got, b)
			w.onePage(t, b)
			png, err := browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", 6+n), Dial: w.dial})
			if err != nil {
				t.Fatal(err)
			}
			checkShot(t, png, 6+n)
		}
		if got[0].CDP == got[1].CDP {
			t.Errorf("two hot browsers share %s", got[0].CDP)
		}
		p, err := w.mgr.Pool(ctx, "browsers")
		if err != nil || p.HotReady != 0 {
			t.Errorf("pool after two claims: %+v %v, want none waiting", p, err)
		}
		// An empty pool falls back to a plain restore.
		newBrowser(t)
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, o := range []browser.ScreenshotOptions{
			{URL: "file:///etc/passwd"},
			{URL: "not a url"},
			{URL: pageURL("allowed.test", 1), Width: 20000},
			{URL: pageURL("allowed.test", 1), Height: -1},
		} {
			if _, err := browser.Capture(ctx, w.mgr, browser.DefaultGolden, o); !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("%+v: %v, want invalid", o, err)
			}
		}
		if _, err := browser.New(ctx, w.mgr, browser.NewOptions{Golden: "no-such-golden", Dial: w.dial}); err == nil {
			t.Error("new from a golden that does not exist succeeded")
		}
		if _, err := browser.New(ctx, w.mgr, browser.NewOptions{Network: &sandbox.Network{Mode: sandbox.NetNone}, Dial: w.dial}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("new with --net none: %v, want invalid", err)
		}
		if _, err := browser.Start(ctx, w.mgr, browser.StartOptions{Network: sandbox.Network{Mode: sandbox.NetEgress}, Dial: w.dial}); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("a second golden of the same name: %v", err)
		}
		sbs, _ := w.mgr.List(ctx)
		if len(sbs) != 0 {
			t.Errorf("bad input left sandboxes behind: %d", len(sbs))
		}
	})
}
