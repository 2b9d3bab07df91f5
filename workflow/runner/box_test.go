package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/tests/testmgr"
)

// TestBoxKeepsHostImage: with the base image built (a stand-in here, from
// its recipe's cached tarball: no mmdebstrap), sandboxes that name no
// image run it, but a run's sandbox still runs the host image, whose
// toolchains the run uses.
func TestBoxKeepsHostImage(t *testing.T) {
	env := testmgr.New(t)
	ctx := context.Background()
	r := image.BaseRecipe()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "etc/os-release", Mode: 0o644, Size: 10, Typeflag: tar.TypeReg})
	tw.Write([]byte("ID=debian\n"))
	tw.Close()
	cache := t.TempDir()
	if err := os.WriteFile(filepath.Join(cache, strings.TrimPrefix(r.Digest(), "sha256:")+".tar"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.Images.Build(ctx, r, image.BuildOptions{Cache: cache}); err != nil {
		t.Fatal(err)
	}
	if def, err := env.Images.Default(ctx); err != nil || def != image.BaseName {
		t.Fatalf("default image with base built: %q, %v", def, err)
	}
	id, err := startBox(ctx, env.Manager, Options{}, "box", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if sb, err := env.Manager.Get(ctx, id); err != nil || sb.Image != "host" {
		t.Fatalf("a run's sandbox: %+v, %v; want the host image", sb, err)
	}
}
