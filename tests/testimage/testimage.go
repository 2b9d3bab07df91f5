// Package testimage builds small runnable OCI images for tests and
// serves them from an in-process registry on loopback.
package testimage

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Program is where images put the idle program, their command: with no
// arguments it waits forever; with some, it prints each file they name.
const Program = "/idle"

// Registry is an OCI registry served over plain HTTP on loopback, which
// go-containerregistry (and so smolvm's pull) reaches without
// --insecure.
type Registry struct {
	// Host is "127.0.0.1:PORT", the first part of its references.
	Host string
	idle []byte
}

// Serve starts a registry until the test ends.
func Serve(t testing.TB) *Registry {
	t.Helper()
	hs := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(hs.Close)
	return &Registry{Host: strings.TrimPrefix(hs.URL, "http://"), idle: Idle(t)}
}

// Push pushes an image of the idle program and files (path to body) as
// r.Host/repo, and returns its reference and ID (its config's digest,
// as smolvm names images).
func (r *Registry) Push(t testing.TB, repo string, files map[string]string) (ref, id string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	add(strings.TrimPrefix(Program, "/"), 0o755, r.idle)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		add(strings.TrimPrefix(p, "/"), 0o644, []byte(files[p]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(Opener(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Cmd: []string{Program}, Env: []string{"PATH=/"}})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(r.Host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("push %s: %v", tag, err)
	}
	digest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return tag.String(), digest.String()
}

// Idle compiles the idle program statically, for images that tests
// build by other means.
func Idle(t testing.TB) []byte {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testimage: no source path")
	}
	out := filepath.Join(t.TempDir(), "idle")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/idle")
	cmd.Dir = filepath.Dir(self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the idle program: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Opener opens b, a layer's tar, for tarball.LayerFromOpener.
func Opener(b []byte) tarball.Opener {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
