package image

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

func testRecipe() sandbox.Recipe {
	return sandbox.Recipe{Name: "built", Suite: "bookworm", Variant: "essential", Epoch: 1,
		Sources: []string{"deb http://deb.debian.org/debian bookworm main"}, Packages: []string{"hello"}, Env: []string{"A=1"}}
}

// TestBuildFromCache stores a recipe's root filesystem from the cache
// (mmdebstrap's tarball, kept by recipe digest) through the import path,
// labelled with the digest; a second build is the stored image even with
// the cache gone, and a changed recipe is a new build.
func TestBuildFromCache(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	r := testRecipe()
	cache := t.TempDir()
	tarball := filepath.Join(cache, strings.TrimPrefix(r.Digest(), "sha256:")+".tar")
	if err := os.WriteFile(tarball, tarOf(t, dir("etc"), file("etc/os-release", "ID=debian\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	img, built, err := s.Build(ctx, r, BuildOptions{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if built || img.Refs[0] != "docker.io/library/built:latest" || img.Config.Labels[RecipeLabel] != r.Digest() || len(img.Layers) != 1 ||
		img.Config.Env[0] != "A=1" || !strings.HasPrefix(img.Source, "build ") {
		t.Fatalf("built from the cache: %+v, mmdebstrap ran %v", img, built)
	}
	if got := readFile(t, filepath.Join(s.Rootfs(img).LowerDirs[0], "etc/os-release")); got != "ID=debian\n" {
		t.Errorf("the image's os-release: %q", got)
	}
	os.Remove(tarball)
	again, built, err := s.Build(ctx, r, BuildOptions{Cache: cache})
	if err != nil || built || again.ID != img.ID {
		t.Fatalf("second build: %+v, %v, %v; want the stored %s", again, built, err, img.ID)
	}

	// A changed recipe builds: here, without mmdebstrap, it cannot.
	t.Setenv("PATH", t.TempDir())
	r.Packages = append(r.Packages, "curl")
	if _, _, err := s.Build(ctx, r, BuildOptions{Cache: cache}); !errors.Is(err, ErrBuild) || !strings.Contains(err.Error(), "apt-get install mmdebstrap") {
		t.Errorf("build without mmdebstrap: %v", err)
	}
	if cur, err := s.Get(ctx, "built"); err != nil || cur.ID != img.ID {
		t.Errorf("a failed build changed the stored image: %+v, %v", cur, err)
	}
}

func TestBuildRefusesBadRecipes(t *testing.T) {
	s, _ := newStore(t)
	for _, change := range []func(*sandbox.Recipe){
		func(r *sandbox.Recipe) { r.Packages = []string{"a,b"} },
		func(r *sandbox.Recipe) { r.Packages = []string{"--hook=x"} },
		func(r *sandbox.Recipe) { r.Exclude = []string{"/a b"} },
		func(r *sandbox.Recipe) { r.Sources = nil },
		func(r *sandbox.Recipe) { r.Suite = "" },
	} {
		r := testRecipe()
		change(&r)
		if _, _, err := s.Build(context.Background(), r, BuildOptions{}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("build of %+v: %v, want ErrInvalid", r, err)
		}
	}
	r := testRecipe()
	r.Name = "Bad Name"
	if _, _, err := s.Build(context.Background(), r, BuildOptions{}); !errors.Is(err, ErrInvalidRef) {
		t.Errorf("build named %q: %v, want ErrInvalidRef", r.Name, err)
	}
}

// TestDefaultImage: the builtin host image is the default until the base
// image is built from its recipe; an image merely tagged base is not it.
func TestDefaultImage(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	check := func(want string) {
		t.Helper()
		if got, err := s.Default(ctx); err != nil || got != want {
			t.Fatalf("default image: %q, %v; want %q", got, err, want)
		}
	}
	check("host")
	if _, err := s.Import(ctx, writeLayout(t, map[string]v1.Image{"": imageOf(t, "sh", layerOf(t, file("a", "a")))}), BaseName, nil); err != nil {
		t.Fatal(err)
	}
	check("host")
	r := BaseRecipe()
	cache := t.TempDir()
	tarball := filepath.Join(cache, strings.TrimPrefix(r.Digest(), "sha256:")+".tar")
	if err := os.WriteFile(tarball, tarOf(t, dir("etc"), file("etc/os-release", "ID=debian\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Build(ctx, r, BuildOptions{Cache: cache}); err != nil {
		t.Fatal(err)
	}
	check(BaseName)
}

// TestRecipeReproducible builds one recipe twice with mmdebstrap into two
// stores: the layers and images must be the same, byte for byte. The
// recipe is the base image's, cut to what CI can pay every run: one
// package unpacked (mmdebstrap's extract variant, seconds) rather than
// the essential set installed (6.5 minutes for two builds at load 25).
// The base image itself was checked so by hand (docs/images.md).
func TestRecipeReproducible(t *testing.T) {
	testenv.Integration(t)
	testenv.NeedRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mmdebstrap is required in CI (scripts/test.sh installs it)")
		}
		t.Skip("mmdebstrap not installed (apt-get install mmdebstrap)")
	}
	r := sandbox.Bookworm("repro", "busybox-static")
	r.Variant = "extract"
	var imgs []*sandbox.Image
	for range 2 {
		s, _ := newStore(t)
		img, built, err := s.Build(context.Background(), r, BuildOptions{})
		if err != nil || !built {
			t.Fatalf("build: %v (built %v)", err, built)
		}
		imgs = append(imgs, img)
	}
	if a, b := imgs[0], imgs[1]; a.ID != b.ID || !slices.Equal(a.Layers, b.Layers) {
		t.Fatalf("two builds of one recipe differ: %s %v, %s %v", a.ID, a.Layers, b.ID, b.Layers)
	}
	t.Logf("image %s, %d MiB", imgs[0].ID, imgs[0].Size>>20)
}
