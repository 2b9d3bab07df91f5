package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/workflow/browser"
)

// TestCLIBrowser drives browser start, new, rm and screenshot from the
// command line in a closed test world, then the /v1/browsers routes
// through a server. (workflow/browser's own tests cover isolation, the
// policy and Playwright.)
func TestCLIBrowser(t *testing.T) {
	c := newSandboxCLI(t)
	if _, err := os.Stat(browser.Chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("chromium not installed")
	}
	w := nettest.New(t)
	c.self = testenv.Smolvm(t)
	t.Setenv("SMOLVM_NET_NETNS", w.HostNS)
	t.Setenv("SMOLVM_NET_RESOLVER", w.Resolver)

	c.must("browser", "start", "--allow-host", "allowed.test", "--pool", "1")
	t.Cleanup(func() { c.run("pool", "rm", browser.DefaultGolden) })
	// --pool made a hot pool of the golden, filled in the background.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var pools []sandbox.Pool
		if err := json.Unmarshal([]byte(c.must("pool", "ls", "--json")), &pools); err != nil {
			t.Fatal(err)
		}
		if len(pools) == 1 && pools[0].Name == browser.DefaultGolden && pools[0].Hot == 1 && pools[0].HotReady == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the golden's hot pool: %+v", pools)
		}
	}
	var b browser.Browser
	if err := json.Unmarshal([]byte(c.must("browser", "new", "--json", "--ttl", "5m")), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.CDP, "ws://127.0.0.1:") || b.ExpiresAt == nil {
		t.Errorf("browser new: %+v", b)
	}
	c.must("browser", "rm", b.ID)
	if out := c.must("ls", "-q"); out != "" {
		t.Errorf("after browser rm: %q", out)
	}

	shot := filepath.Join(t.TempDir(), "shot.png")
	c.must("browser", "screenshot", "http://allowed.test/", "-o", shot, "--viewport", "640x480")
	checkPNG(t, mustRead(t, shot), 640, 480)

	for _, args := range [][]string{
		{"browser", "screenshot", "http://allowed.test/"},                                 // no -o
		{"browser", "screenshot", "http://allowed.test/", "-o", shot, "--viewport", "10"}, // no height
		{"browser", "screenshot", "ftp://allowed.test/", "-o", shot},
		{"browser", "start", "--net", "none", "--golden", "other"},
		{"browser", "start", "--golden", "other", "--pool", "-1"},
		{"browser", "new", "--golden", "../x"},
	} {
		if _, errOut, code := c.run(args...); code != 125 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("smolvm %v: exit %d, stderr %q; want 125 and one line", args, code, errOut)
		}
	}
	if out := c.must("ls", "-q"); out != "" {
		t.Errorf("bad input left sandboxes: %q", out)
	}

	// The API's routes, over the server's socket.
	sock := strings.TrimPrefix(serveAPI(t, c), "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	post := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, "http://smolvm"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+os.Getenv("SMOLVM_TOKEN"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	code, data := post("POST", "/v1/browsers/screenshot", `{"url":"http://allowed.test/","width":320,"height":200}`)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/browsers/screenshot: %d %s", code, data)
	}
	checkPNG(t, data, 320, 200)
	// The copy goes after the answer (browser.Take), but it goes.
	for deadline := time.Now().Add(15 * time.Second); c.must("ls", "-q") != ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the screenshot's browser outlived its answer by 15 s: %q", c.must("ls", "-q"))
		}
	}
	code, data = post("POST", "/v1/browsers", `{"ttl":"2m"}`)
	var ab api.Browser
	if code != http.StatusCreated || json.Unmarshal(data, &ab) != nil || !strings.HasPrefix(ab.CDP, "ws://127.0.0.1:") {
		t.Fatalf("POST /v1/browsers: %d %s", code, data)
	}
	if code, data := post("DELETE", "/v1/browsers/"+ab.ID, ""); code != http.StatusNoContent {
		t.Errorf("DELETE /v1/browsers/%s: %d %s", ab.ID, code, data)
	}
	if code, data := post("POST", "/v1/browsers/screenshot", `{"url":"http://allowed.test/","width":99999}`); code != http.StatusBadRequest {
		t.Errorf("a viewport out of range: %d %s", code, data)
	}
}

func checkPNG(t *testing.T, data []byte, w, h int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("PNG is %v, want %dx%d", b, w, h)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBrowserNewNetHelp: browser new's --net shows no default of "none",
// which a browser refuses; without --net it keeps the golden's policy.
func TestBrowserNewNetHelp(t *testing.T) {
	out := newCLI(t, t.TempDir()).must("browser", "new", "--help")
	line := regexp.MustCompile(`(?m)^\s+--net .*$`).FindString(out)
	if line == "" || strings.Contains(line, "none") || !strings.Contains(line, "the golden's policy") {
		t.Errorf("browser new --help: --net line %q", line)
	}
}
