package browser_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testmgr"
	"smolvm.dev/smolvm/workflow/browser"
)

// TestBrowserImage builds the browser image from its recipe (mmdebstrap
// from Debian's archive, minutes; the root filesystem is then cached in
// testenv.Cache, by recipe digest), checks that a second build is the
// stored image, and renders a page in a browser of a golden on it.
func TestBrowserImage(t *testing.T) {
	testenv.Runsc(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mmdebstrap is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("mmdebstrap not installed (apt-get install mmdebstrap)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var id string
	w := openWorld(t, func(env *testmgr.Env) string {
		t0 := time.Now()
		o := image.BuildOptions{Cache: testenv.Cache(t, "images")}
		img, built, err := env.Images.Build(ctx, browser.ImageRecipe(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("browser image %s, %d MB: mmdebstrap ran: %v; %s", img.ID, img.Size>>20, built, time.Since(t0))
		again, built, err := env.Images.Build(ctx, browser.ImageRecipe(), o)
		if err != nil {
			t.Fatal(err)
		}
		if built || again.ID != img.ID {
			t.Errorf("second build: built %v, image %s; want the stored %s", built, again.ID, img.ID)
		}
		id = img.ID
		return browser.ImageName
	})
	b, err := browser.New(ctx, w.mgr, browser.NewOptions{Dial: w.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer browser.Release(ctx, w.mgr, b.ID)
	if sb, err := w.mgr.Get(ctx, b.ID); err != nil || sb.ImageID != id {
		t.Fatalf("browser %s runs image %+v (%v), want %s", b.ID, sb, err, id)
	}
	png, err := browser.Screenshot(ctx, b.CDP, browser.ScreenshotOptions{URL: pageURL("allowed.test", 3), Dial: w.dial})
	if err != nil {
		t.Fatal(err)
	}
	checkShot(t, png, 3)
}
