// Package browser runs headless Chromium in sandboxes: a golden browser,
// booted once and checkpointed, and forks restored from it that each
// start with no cookies, storage, cache or history, reachable over CDP.
package browser

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// Defaults and bounds.
const (
	// DefaultGolden names the golden browser's snapshot.
	DefaultGolden = "browser"
	// Chromium is Debian's Chromium binary (the /usr/bin/chromium wrapper
	// reads /etc/chromium.d, which the host image does not have).
	Chromium = "/usr/lib/chromium/chromium"
	// CDPPort is the DevTools port inside the sandbox, published on the host.
	CDPPort = 9222
	// DefaultTTL is how long a browser lives unless released first.
	DefaultTTL = 10 * time.Minute
	// DefaultBootTimeout bounds the golden's wait for DevTools: a cold
	// Chromium start under gVisor takes seconds on a loaded machine.
	DefaultBootTimeout = 60 * time.Second
	// DefaultReadyTimeout bounds a fork's wait for DevTools.
	DefaultReadyTimeout = 20 * time.Second
	// DefaultWidth and DefaultHeight are the screenshot viewport.
	DefaultWidth, DefaultHeight = 1280, 800
	// DefaultCPUs is a browser's CPU limit unless StartOptions.Limits
	// sets one (the host's CPUs if it has fewer). A run (connect, two
	// pages, their screenshots) kept one CPU busy, 1.7-2.3 CPU-seconds in
	// 2.3-2.7 s, and at one CPU the sandbox's CFS quota throttled it for
	// 0-226 ms of that (load 7-10, 2026-12-07): Chromium's browser and
	// renderer processes and gVisor's sentry want to run at once. At two
	// CPUs the run to its first screenshot was faster in 6 of 7 A/B pairs
	// (BenchmarkBrowserRun, interleaved, load 6-16; see docs/browser.md).
	// Each browser counts as much against a tenant's CPU quota.
	DefaultCPUs = 2.0
	// MaxSide bounds a viewport's sides and a full page's height, in CSS
	// pixels: Chromium's own texture limit is 16384.
	MaxSide = 16384
)

var (
	// ErrNotReady is a browser whose DevTools endpoint did not answer in time.
	ErrNotReady = errdefs.New(errdefs.ErrUnavailable, "browser did not answer")
	// ErrLoad is a page that did not load (refused by the network policy,
	// unreachable, or an error page).
	ErrLoad = errdefs.New(errdefs.ErrUnavailable, "page did not load")
	// ErrNoBrowser is a sandbox that is not a browser, which Release
	// answers as it answers one that does not exist.
	ErrNoBrowser = errdefs.New(errdefs.ErrNotFound, "no such browser")
)

// Label marks a browser sandbox; its value is the golden's name. The golden
// carries it and its copies keep it, so Release can tell a browser from a
// plain sandbox, which it must not remove.
const Label = "smolvm.browser"

// flags are Chromium's flags inside gVisor: headless with no GPU, no
// sandbox of its own (gVisor is the sandbox; its user namespaces would
// need privileges commands do not have), /dev/shm unused (small in
// gVisor). DevTools listens on loopback only (headless Chromium ignores
// --remote-debugging-address), on devtoolsPort; --remote-allow-origins lets
// CDP clients that send an Origin connect.
var flags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
	// No zygotes and no GPU process (its software compositing runs in the
	// browser process): three processes fewer, idle in every copy, as
	// the renderer is started once, before the checkpoint.
	"--no-zygote", "--in-process-gpu",
	"--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
	"--disable-breakpad", "--disable-component-update", "--disable-sync",
	// One renderer for every page, started before the checkpoint: a
	// process start costs seconds of Chromium under gVisor, and each
	// browser is a sandbox of its own already.
	"--renderer-process-limit=1", "--disable-site-isolation-trials",
	// No omnibox popups: headless Chromium preloads them as two WebUI
	// targets in a renderer of their own, which every copy restored and
	// Playwright's connectOverCDP attached to and waited on (its slowest
	// steps, 0.4-0.6 s at load 25).
	"--disable-features=site-per-process,IsolateOrigins,WebUIOmniboxPopup,WebUIOmniboxAimPopup",
	"--remote-debugging-port=" + strconv.Itoa(devtoolsPort),
	"--remote-allow-origins=*", "--user-data-dir=/tmp/chromium",
}

// devtoolsPort is where Chromium's DevTools listens, on the sandbox's
// loopback; Command relays CDPPort on every address to it.
const devtoolsPort = CDPPort + 1

// Command is a browser sandbox's main command: a relay from CDPPort on
// every address to DevTools on loopback, so that the published port
// reaches it (the agent's, guest.Forward: Go, where a Python relay cost
// two thread starts per connection), and Chromium, whose end ends the
// sandbox. The relay listens on the wildcard address, which a restored
// copy keeps although its own address differs from the golden's.
func Command() []string {
	relay := fmt.Sprintf(`"$0" forward 0.0.0.0:%d 127.0.0.1:%d & exec "$@"`, CDPPort, devtoolsPort)
	cmd := append([]string{"/bin/sh", "-c", relay, sandbox.AgentPath, Chromium}, flags...)
	// Start on about:blank: without a URL Chromium opens its New Tab page,
	// a WebUI page whose navigation a checkpoint can catch uncommitted,
	// and Playwright's connectOverCDP waits for every page's first commit.
	return append(cmd, "about:blank")
}

// Dialer connects to a host address. Nil dials directly; a test whose
// network lives in its own namespace dials there.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// StartOptions describe a golden browser.
type StartOptions struct {
	// Golden names the snapshot (default DefaultGolden).
	Golden string
	// Image runs Chromium; empty is the host image, which needs Debian's
	// chromium installed on the host.
	Image string
	// Network is what browsers may reach: egress (the default) or full,
	// with the user's allow-list. The DevTools port is added to it.
	Network sandbox.Network
	// Limits are each browser's; zero values take the defaults, and
	// CPUs DefaultCPUs.
	Limits sandbox.Limits
	// Timeout bounds the wait for DevTools (default DefaultBootTimeout).
	Timeout time.Duration
	Dial    Dialer
}

// Start boots Chromium in a sandbox, waits until its DevTools endpoint
// answers, and checkpoints it as the golden browser; the sandbox itself is
// removed. It returns the golden's snapshot.
func Start(ctx context.Context, svc sandbox.Service, o StartOptions) (*sandbox.Snapshot, error) {
	if o.Golden == "" {
		o.Golden = DefaultGolden
	}
	if err := checkNames(o.Golden, "", o.Image); err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultBootTimeout
	}
	pol, err := policy(o.Network)
	if err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	pol.Ports = append(append([]sandbox.Port(nil), pol.Ports...), sandbox.Port{Port: CDPPort})
	cfg := sandbox.Config{
		Cmd:     Command(),
		Env:     []string{"HOME=/tmp"},
		Limits:  o.Limits,
		Network: &pol,
		// A hot pool of the golden asks each copy for /json/version before
		// pausing it: the first answer after a restore took 0.35-2.5 s at
		// load 25, against 0.04-0.75 s for a warmed copy's.
		Labels: map[string]string{sandbox.LabelWarm: fmt.Sprintf("%d/json/version", CDPPort), Label: o.Golden},
	}
	if cfg.Limits.CPUs == 0 {
		cfg.Limits.CPUs = min(DefaultCPUs, float64(runtime.NumCPU()))
	}
	// The host image by default, not the base image, which has no Chromium.
	create := sandbox.CreateOptions{Image: cmp.Or(o.Image, sandbox.DefaultImage), Config: cfg, Start: true}
	sb, err := svc.Create(ctx, create)
	if errors.Is(err, sandbox.ErrInvalid) && o.Limits.CPUs == 0 && cfg.Limits.CPUs > 1 {
		// Through a server on a host with fewer CPUs than this one,
		// which refuses a limit above its own: its default then.
		create.Config.Limits.CPUs = 0
		sb, err = svc.Create(ctx, create)
	}
	if err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	defer svc.Remove(context.WithoutCancel(ctx), sb.ID, true)
	ep, err := endpoint(ctx, svc, sb.ID, o.Timeout, o.Dial)
	if err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	// One screenshot before the checkpoint, so that every browser starts
	// with the renderer running and the raster code loaded: a first
	// screenshot took 10 s without, 2 s with.
	warm := ScreenshotOptions{URL: "about:blank", Width: DefaultWidth, Height: DefaultHeight, Timeout: o.Timeout, Dial: o.Dial}
	if err := warmUp(ctx, ep.ws, warm); err != nil {
		return nil, fmt.Errorf("browser start: warm-up: %w", err)
	}
	snap, err := svc.Checkpoint(ctx, sb.ID, sandbox.CheckpointOptions{Name: o.Golden, Stop: true})
	if err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	return snap, nil
}

// Browser is one running fork of a golden browser: its sandbox's ID and
// name, its CDP WebSocket URL (for Playwright's connectOverCDP, Puppeteer's
// connect or chrome-remote-interface) and DevTools HTTP endpoint, and when
// it expires. It is the API's wire type.
type Browser = api.Browser

// NewOptions describe a new browser.
type NewOptions struct {
	Golden string // the golden's snapshot (default DefaultGolden)
	Name   string // the sandbox's name; "" generates one
	// TTL ends the browser after this long (default DefaultTTL): its
	// agent stops it, and serve's reaper (or smolvm gc) removes it after
	// the expiry grace. Release removes it earlier.
	TTL time.Duration
	// Network, if set, replaces the golden's allow-list for this browser
	// (published ports stay).
	Network *sandbox.Network
	// Timeout bounds the wait for DevTools (default DefaultReadyTimeout).
	Timeout time.Duration
	Dial    Dialer
}

// New restores a browser from the golden and returns its CDP endpoint once
// it answers. Nothing is left behind on failure.
func New(ctx context.Context, svc sandbox.Service, o NewOptions) (*Browser, error) {
	if o.Golden == "" {
		o.Golden = DefaultGolden
	}
	if err := checkNames(o.Golden, o.Name, ""); err != nil {
		return nil, fmt.Errorf("browser new: %w", err)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < 0 {
		return nil, fmt.Errorf("browser new: %w: --ttl %s must not be negative", sandbox.ErrInvalid, o.TTL)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultReadyTimeout
	}
	if o.Network != nil {
		pol, err := policy(*o.Network)
		if err != nil {
			return nil, fmt.Errorf("browser new: %w", err)
		}
		o.Network = &pol
	}
	// The TTL goes with the restore: a hot copy gets its deadline in the
	// identity the claim hands over, with no SetTTL round trip after.
	sb, err := svc.Restore(ctx, o.Golden, sandbox.RestoreOptions{Name: o.Name, TTL: o.TTL})
	if err != nil {
		return nil, fmt.Errorf("browser new: %w", err)
	}
	b, err := ready(ctx, svc, sb, o)
	if err != nil {
		svc.Remove(context.WithoutCancel(ctx), sb.ID, true)
		return nil, fmt.Errorf("browser new: %w", err)
	}
	return b, nil
}

func ready(ctx context.Context, svc sandbox.Service, sb *sandbox.Sandbox, o NewOptions) (*Browser, error) {
	if o.Network != nil {
		if _, err := svc.NetUpdate(ctx, sb.ID, *o.Network); err != nil {
			return nil, err
		}
	}
	ep, err := endpoint(ctx, svc, sb.ID, o.Timeout, o.Dial)
	if err != nil {
		return nil, err
	}
	return &Browser{ID: sb.ID, Name: sb.Name, CDP: ep.ws, HTTP: ep.http, ExpiresAt: sb.ExpiresAt}, nil
}

// policy is a browser's network policy: egress unless full is asked for;
// none cannot reach the published DevTools port.
func policy(p sandbox.Network) (sandbox.Network, error) {
	switch p.Mode {
	case "":
		p.Mode = sandbox.NetEgress
	case sandbox.NetNone:
		return p, fmt.Errorf("%w: --net none: a browser needs egress or full (its DevTools port is published)", sandbox.ErrInvalidNetwork)
	}
	return p, p.Validate()
}

// checkNames checks the names a call takes before anything starts: a bad
// golden name would otherwise fail only at the checkpoint, after a boot.
func checkNames(golden, name, image string) error {
	if err := names.Check(names.Snapshot, golden); err != nil {
		return err
	}
	if name != "" {
		if err := names.Check(names.Sandbox, name); err != nil {
			return err
		}
	}
	if image != "" {
		return names.Check(names.Image, image)
	}
	return nil
}

// Release removes a browser. Any other sandbox is ErrNoBrowser, and stays.
func Release(ctx context.Context, svc sandbox.Service, ref string) error {
	sb, err := browserOf(ctx, svc, ref)
	if err == nil {
		err = svc.Remove(ctx, sb.ID, true)
	}
	if err != nil {
		return fmt.Errorf("browser release: %w", err)
	}
	return nil
}

// browserOf returns the sandbox ref names if it is a browser. An expired
// one still is while it is listed: a Manager's ExpiredError carries its
// record (a Client's does not, so the reaper removes it).
func browserOf(ctx context.Context, svc sandbox.Service, ref string) (*sandbox.Sandbox, error) {
	sb, err := svc.Get(ctx, ref)
	if ee := (*sandbox.ExpiredError)(nil); errors.As(err, &ee) && ee.Sandbox != nil {
		sb, err = ee.Sandbox, nil
	}
	if err != nil {
		return nil, err
	}
	if _, ok := sb.Config.Labels[Label]; !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoBrowser, ref)
	}
	return sb, nil
}

type devtools struct{ http, ws string }

// endpoint finds the sandbox's published DevTools port and waits until
// /json/version answers there, for at most timeout.
func endpoint(ctx context.Context, svc sandbox.Service, id string, timeout time.Duration, dial Dialer) (devtools, error) {
	st, err := svc.NetStatus(ctx, id)
	if err != nil {
		return devtools{}, err
	}
	var hostport string
	for _, p := range st.Ports {
		if p.Port == CDPPort {
			hostport = p.DialAddr()
		}
	}
	if hostport == "" {
		return devtools{}, fmt.Errorf("%w: %s publishes no DevTools port %d (not a browser sandbox?)", sandbox.ErrInvalid, id, CDPPort)
	}
	base := "http://" + hostport
	hc := httpClient(dial)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ws, err := version(ctx, hc, base)
		if err == nil {
			return devtools{http: base, ws: ws}, nil
		}
		last = err
		select {
		case <-ctx.Done():
			if sb, err := svc.Get(context.WithoutCancel(ctx), id); err == nil && sb.State != sandbox.StateRunning {
				return devtools{}, fmt.Errorf("%w: %s is %s: %v", ErrNotReady, id, sb.State, last)
			}
			return devtools{}, fmt.Errorf("%w within %s: %v", ErrNotReady, timeout, last)
		case <-time.After(wait):
		}
	}
}

// version asks /json/version for the browser's WebSocket URL, rewritten to
// the address we reached (Chromium names its own listening address).
func version(ctx context.Context, hc *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/json/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/json/version: %s", resp.Status)
	}
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.WS == "" {
		return "", fmt.Errorf("/json/version: no webSocketDebuggerUrl in %.200q", body)
	}
	u, err := url.Parse(v.WS)
	if err != nil {
		return "", fmt.Errorf("/json/version: %w", err)
	}
	u.Host = base[len("http://"):]
	return u.String(), nil
}

func httpClient(dial Dialer) *http.Client {
	if dial == nil {
		return &http.Client{}
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// ScreenshotOptions describe one screenshot.
type ScreenshotOptions struct {
	URL string
	// FullPage captures the whole page, not only the viewport.
	FullPage bool
	// Width and Height are the viewport (default 1280×800).
	Width, Height int
	// Timeout bounds the page load (default 30 s).
	Timeout time.Duration
	Dial    Dialer
}

func (o *ScreenshotOptions) check() error {
	if o.Width == 0 {
		o.Width = DefaultWidth
	}
	if o.Height == 0 {
		o.Height = DefaultHeight
	}
	if o.Width < 1 || o.Height < 1 || o.Width > MaxSide || o.Height > MaxSide {
		return fmt.Errorf("%w: viewport %dx%d: each side must be between 1 and %d", sandbox.ErrInvalid, o.Width, o.Height, MaxSide)
	}
	// A data: URL carries its page: what an agent renders without a
	// server. file:, javascript: and the like stay refused.
	u, err := url.Parse(o.URL)
	web := err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
	if !web && !(err == nil && u.Scheme == "data" && u.Opaque != "") {
		return fmt.Errorf("%w: URL %.200q: want an http, https or data URL", sandbox.ErrInvalid, o.URL)
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return nil
}

// Screenshot loads o.URL in the browser whose DevTools WebSocket URL is
// cdpURL and returns a PNG of it.
func Screenshot(ctx context.Context, cdpURL string, o ScreenshotOptions) ([]byte, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	return capture(ctx, cdpURL, o, false)
}

// capture is Screenshot of any URL, in a new page closed after; in a
// fresh browser (fresh: one Capture made and removes after), in the page
// it starts with instead. Every copy's page is the golden's about:blank,
// the same in each, and nothing else ever uses it: Target.createTarget
// and the attach of a new page took 150-265 ms of a run at load 10
// (2026-12-07, DEBUG=pw:protocol), closing it more.
func capture(ctx context.Context, cdpURL string, o ScreenshotOptions, fresh bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := dialCDP(ctx, cdpURL, dialOptions(o.Dial))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if fresh {
		pages, err := c.pages(ctx)
		if err != nil {
			return nil, err
		}
		if len(pages) != 1 {
			return nil, fmt.Errorf("a fresh browser has %d pages, want the golden's one: %+v", len(pages), pages)
		}
		s, err := c.attach(ctx, pages[0].TargetID)
		if err != nil {
			return nil, err
		}
		return render(ctx, c, s, o)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	defer c.call(context.WithoutCancel(ctx), "", "Target.closeTarget", map[string]any{"targetId": target.TargetID}, nil)
	s, err := c.attach(ctx, target.TargetID)
	if err != nil {
		return nil, err
	}
	return render(ctx, c, s, o)
}

// warmUp renders o.URL in the golden's one page, the about:blank tab
// Chromium starts with, and leaves it open: closing a page is
// asynchronous, and a checkpoint taken while one closes gave browsers a
// page that never answered. It then checks that the browser has settled,
// one page with a committed URL, since Playwright's connectOverCDP waits
// for every page it finds to commit a navigation.
func warmUp(ctx context.Context, cdpURL string, o ScreenshotOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := dialCDP(ctx, cdpURL, dialOptions(o.Dial))
	if err != nil {
		return err
	}
	defer c.Close()
	// DevTools may answer before the first tab exists.
	var pages []page
	for {
		if pages, err = c.pages(ctx); err != nil || len(pages) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no page: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	if len(pages) != 1 {
		return fmt.Errorf("chromium started with %d pages, want one: %+v", len(pages), pages)
	}
	s, err := c.attach(ctx, pages[0].TargetID)
	if err != nil {
		return err
	}
	if _, err := render(ctx, c, s, o); err != nil {
		return err
	}
	if err := c.call(ctx, "", "Target.detachFromTarget", map[string]any{"sessionId": s}, nil); err != nil {
		return err
	}
	if pages, err = c.pages(ctx); err != nil {
		return err
	}
	if len(pages) != 1 || pages[0].URL != o.URL {
		return fmt.Errorf("browser did not settle: pages %+v, want one at %s", pages, o.URL)
	}
	return nil
}

func dialOptions(dial Dialer) *websocket.DialOptions {
	if dial == nil {
		return nil
	}
	return &websocket.DialOptions{HTTPClient: httpClient(dial)}
}

// render loads o.URL in the page of session s and captures it.
func render(ctx context.Context, c *cdp, s string, o ScreenshotOptions) ([]byte, error) {
	if err := c.call(ctx, s, "Page.enable", nil, nil); err != nil {
		return nil, err
	}
	if err := c.call(ctx, s, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": o.Width, "height": o.Height, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return nil, err
	}
	loaded := c.expect(s, "Page.loadEventFired")
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := c.call(ctx, s, "Page.navigate", map[string]any{"url": o.URL}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("%w: %s: %s", ErrLoad, o.URL, nav.ErrorText)
	}
	select {
	case <-loaded:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: no load event: %v", ErrLoad, o.URL, ctx.Err())
	}
	params := map[string]any{"format": "png"}
	if o.FullPage {
		var m struct {
			Content struct{ Width, Height float64 } `json:"cssContentSize"`
		}
		if err := c.call(ctx, s, "Page.getLayoutMetrics", nil, &m); err != nil {
			return nil, err
		}
		w, h := max(m.Content.Width, float64(o.Width)), min(max(m.Content.Height, 1), MaxSide)
		params["captureBeyondViewport"] = true
		params["clip"] = map[string]any{"x": 0, "y": 0, "width": min(w, MaxSide), "height": h, "scale": 1}
	}
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	if err := c.call(ctx, s, "Page.captureScreenshot", params, &shot); err != nil {
		return nil, err
	}
	if len(shot.Data) == 0 {
		return nil, errors.New("Page.captureScreenshot: empty image")
	}
	return shot.Data, nil
}

// Capture is one command's screenshot: a new browser from the golden, the
// page, and the browser's removal.
func Capture(ctx context.Context, svc sandbox.Service, golden string, o ScreenshotOptions) ([]byte, error) {
	png, id, err := Take(ctx, svc, golden, o)
	if id != "" {
		Release(context.WithoutCancel(ctx), svc, id)
	}
	return png, err
}

// Take is Capture without the removal: it returns the screenshot and the
// ID of the browser it was taken in, which the caller releases (Release)
// once it has delivered the PNG, so that whoever waits for the picture
// does not also wait for the removal (0.4-0.5 s at load 6-8). A browser
// that could not be made has no ID; one made has its ID even on error.
func Take(ctx context.Context, svc sandbox.Service, golden string, o ScreenshotOptions) (png []byte, id string, err error) {
	if golden == "" {
		golden = DefaultGolden
	}
	if err := checkNames(golden, "", ""); err != nil {
		return nil, "", fmt.Errorf("browser screenshot: %w", err)
	}
	if err := o.check(); err != nil {
		return nil, "", fmt.Errorf("browser screenshot: %w", err)
	}
	b, err := New(ctx, svc, NewOptions{Golden: golden, TTL: o.Timeout + DefaultReadyTimeout, Dial: o.Dial})
	if err != nil {
		return nil, "", err
	}
	png, err = capture(ctx, b.CDP, o, true)
	if err != nil {
		return nil, b.ID, fmt.Errorf("browser screenshot: %w", err)
	}
	return png, b.ID, nil
}
