package mcpserver_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"smolvm.dev/smolvm/runtime/manager"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/browser"
)

// TestBrowserScreenshotTool: browser_screenshot over stdio returns a PNG
// of the page (a golden made beforehand, in a closed test network), and
// an error naming the refusal for a page the policy does not allow.
func TestBrowserScreenshotTool(t *testing.T) {
	testenv.Runsc(t)
	if _, err := os.Stat(browser.Chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("chromium not installed")
	}
	w := nettest.New(t)
	smolvm := testenv.Smolvm(t)
	env := testmgr.New(t, func(c *manager.Config) { c.Network = w.Host(smolvm) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := browser.Start(ctx, env.Manager, browser.StartOptions{
		Network: sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}},
		Dial:    env.Manager.DialPublished,
	}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(smolvm, "--data-dir", env.Dir, "--runsc", testenv.Runsc(t), "mcp")
	cmd.Env = append(os.Environ(), "SMOLVM_GUEST_BINARY="+env.GuestBinary, "SMOLVM_NET_NETNS="+w.HostNS, "SMOLVM_NET_RESOLVER="+w.Resolver)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "smolvm-test", Version: "v0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_screenshot", Arguments: map[string]any{"url": "http://allowed.test/", "width": 400, "height": 300}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("browser_screenshot: %v %+v", err, res)
	}
	img, ok := res.Content[0].(*mcp.ImageContent)
	if !ok || img.MIMEType != "image/png" {
		t.Fatalf("browser_screenshot: content %T", res.Content[0])
	}
	p, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil || p.Bounds().Dx() != 400 || p.Bounds().Dy() != 300 {
		t.Fatalf("browser_screenshot: PNG %v, %v", err, p)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_screenshot", Arguments: map[string]any{"url": "http://other.test/"}})
	if err != nil || !res.IsError {
		t.Fatalf("a refused page: %v %+v", err, res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "ERR_NAME_NOT_RESOLVED") {
		t.Errorf("a refused page: %+v", res.Content[0])
	}
	if sbs, _ := env.Manager.List(ctx); len(sbs) != 0 {
		t.Errorf("screenshots left %d sandboxes", len(sbs))
	}
}
