package manager

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testdeps"
	"smolvm.dev/smolvm/tests/testenv"
	"smolvm.dev/smolvm/tests/testimage"
	"smolvm.dev/smolvm/workflow/trust"
)

// testManager is a Manager over a fresh data dir, with real runsc.
type testManager struct {
	*Manager
	dir string
}

func newManager(t testing.TB, opts ...func(*Config)) *testManager {
	return openManager(t, t.TempDir(), opts...)
}

// openManager opens a Manager, with its own store handles, over dir. Tests
// open several over one dir to show state lives on disk, not in memory.
func openManager(t testing.TB, dir string, opts ...func(*Config)) *testManager {
	t.Helper()
	c := Config{DataDir: dir, Backends: testdeps.Backends(t), GuestBinary: testenv.Guest(t),
		Gate: func(st *store.Store) Gate { return trust.NewGates(st) }}
	for _, f := range opts {
		f(&c)
	}
	m, err := Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	// The store closes last, after the removals below and whatever
	// cleanups the test registers later.
	t.Cleanup(func() { m.Close() })
	t.Cleanup(func() {
		// Sandboxes hold mounts under dir: remove them before TempDir's
		// cleanup tries to.
		// listRecords, not List: pooled sandboxes too.
		rs, _ := listRecords(context.Background(), m.st, "", true)
		for _, r := range rs {
			m.Remove(context.Background(), r.ID, true)
		}
		m.GC(context.Background())
		// Volumes are mounted under dir too.
		vs, _ := m.ListVolumes(context.Background())
		for _, v := range vs {
			m.RemoveVolume(tenant.With(context.Background(), v.Tenant), v.Name, true)
		}
	})
	return &testManager{Manager: m, dir: dir}
}

// run starts an idle sandbox from the host image.
func (m *testManager) run(t *testing.T, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	sb, err := m.Create(context.Background(), sandbox.CreateOptions{Config: cfg, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// sh runs a shell command in sb and returns stdout, stderr and the exit.
func (m *testManager) sh(t testing.TB, sb *sandbox.Sandbox, script string) (string, string, sandbox.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), exit
}

type file struct {
	name string
	mode int64
	body []byte
}

func layer(t *testing.T, files ...file) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		typ := byte(tar.TypeReg)
		if strings.HasSuffix(f.name, "/") {
			typ = tar.TypeDir
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: typ}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.body)
	}
	tw.Close()
	l, err := tarball.LayerFromOpener(testimage.Opener(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// importImage writes layers as an OCI layout and imports it as ref.
func (m *testManager) importImage(t *testing.T, ref string, cmd []string, layers ...v1.Layer) *sandbox.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Cmd: cmd, Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag.String()})); err != nil {
		t.Fatal(err)
	}
	im, err := m.images.Import(context.Background(), dir, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// holdMemory is a script that leaves a process holding mib MiB of touched,
// incompressible memory, and returns once it does.
func holdMemory(mib int) string {
	return fmt.Sprintf(`rm -f /tmp/held; python3 -c 'import os, time
b = bytearray(os.urandom(%d << 20))
open("/tmp/held", "w").close()
time.sleep(1e9)' >/dev/null 2>&1 & while [ ! -e /tmp/held ]; do sleep 0.05; done`, mib)
}

// killAfter starts a real smolvm over m's data dir with args (and env on
// top of this process's), and kills it after delay: a crash at that point.
func (m *testManager) killAfter(t *testing.T, delay time.Duration, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(testenv.Smolvm(t), append([]string{"--data-dir", m.dir, "--runsc", testenv.Runsc(t)}, args...)...)
	cmd.Env = append(append(os.Environ(), "SMOLVM_GUEST_BINARY="+testenv.Guest(t)), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay)
	cmd.Process.Kill()
	cmd.Wait()
}

// afterGC runs gc, as after a crash, and lists what is left.
func (m *testManager) afterGC(t *testing.T) []*sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	if _, err := m.GC(ctx); err != nil {
		t.Fatal(err)
	}
	sbs, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sbs
}

// filledPool creates the pool o and fills it.
func (m *testManager) filledPool(t testing.TB, o sandbox.PoolOptions) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.CreatePool(ctx, o); err != nil {
		t.Fatal(err)
	}
	if _, err := m.FillPool(ctx, o.Name); err != nil {
		t.Fatal(err)
	}
}
