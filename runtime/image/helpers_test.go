package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/tests/testenv"
)

// entry is one tar entry of a test layer.
type entry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
}

func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func hardlink(name, target string) entry { return entry{name: name, typ: tar.TypeLink, link: target} }

var testTime = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, Size: int64(len(e.body)), ModTime: testTime,
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	b := tarOf(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, cmd string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hi"},
		Cmd:        []string{cmd},
		WorkingDir: "/srv",
		User:       "1000",
		Labels:     map[string]string{"test": "yes"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dataDir := t.TempDir()
	return openStore(t, dataDir), dataDir
}

// openStore opens the store of dataDir with its own database handle, as a
// separate smolvm process would.
func openStore(t *testing.T, dataDir string) *Store {
	t.Helper()
	testenv.NeedRoot(t) // the host image and layers are owned as in the image
	ctx := context.Background()
	st, err := store.Open(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := Open(ctx, dataDir, st)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeLayout writes images into a new OCI layout, annotated with names
// where given.
func writeLayout(t *testing.T, imgs map[string]v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for ref, img := range imgs {
		var opts []layout.Option
		if ref != "" {
			opts = append(opts, layout.WithAnnotations(map[string]string{annotationRefName: ref}))
		}
		if err := p.AppendImage(img, opts...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeDockerSave writes img as `docker save` does: config, uncompressed
// layer tars and manifest.json in a plain tar.
func writeDockerSave(t *testing.T, img v1.Image, tags ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: testTime}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	add(cfgName.Hex+".json", cfg)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := d.Hex + "/layer.tar"
		add(p, b)
		layerPaths = append(layerPaths, p)
	}
	m, err := json.Marshal([]map[string]any{{"Config": cfgName.Hex + ".json", "RepoTags": tags, "Layers": layerPaths}})
	if err != nil {
		t.Fatal(err)
	}
	add("manifest.json", m)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// startRegistry runs an in-process registry and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

func diffIDs(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range cf.RootFS.DiffIDs {
		out = append(out, d.String())
	}
	return out
}

// storeEntries lists the layer store and the images table, to check that a
// failed operation left nothing behind.
func storeEntries(t *testing.T, s *Store) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(s.layers, "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range des {
		out = append(out, "layer "+d.Name())
	}
	ids, err := store.Strings(context.Background(), s.st.DB(), `SELECT id FROM images`)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		out = append(out, "image "+id)
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
