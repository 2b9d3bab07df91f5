package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/api/e2bapi"
	"smolvm.dev/smolvm/errdefs"
	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
	"smolvm.dev/smolvm/tests/testmgr"
)

// TestSDKTemplates runs templates.mjs through the official e2b npm
// package against a real smolvm serve: builds from steps with a started
// server, Sandbox.create of the template, tags, background builds.
func TestSDKTemplates(t *testing.T) {
	node, npm := nodeTools(t)
	installSDK(t, npm)
	s := smolvmServe(t)
	busyboxBase(t, s.env)
	s.runNode(t, node, "templates.mjs")
}

// busyboxBase builds busybox-base in env's store: busybox, /bin/bash (the
// SDK's commands run bash -l -c; ash takes those flags), root and E2B's
// "user" (whom fromDockerfile makes the default) in /etc/passwd, a PATH.
func busyboxBase(t *testing.T, env *testmgr.Env) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{"busybox": testimage.Busybox(t), "bash": []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n")}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := build.New(context.Background(), env.Manager, env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = b.Build(context.Background(), build.Options{Context: dir, Tags: []string{"busybox-base"}, Progress: &out, Dockerfile: []byte(`FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY bash /bin/bash
RUN ["/bin/sh", "-c", "mkdir -p /etc /tmp /root /home/user && chown 1000:1000 /home/user && printf 'root:x:0:0:root:/root:/bin/sh\\nuser:x:1000:1000::/home/user:/bin/sh\\n' > /etc/passwd && printf 'root:x:0:\\nuser:x:1000:\\n' > /etc/group"]
ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin
`)})
	if err != nil {
		t.Fatalf("busybox-base: %v\n%s", err, out.String())
	}
}

// TestReadyOfSDKHelpers reads the commands the SDK's own ready helpers
// make as smolvm's ready checks.
func TestReadyOfSDKHelpers(t *testing.T) {
	node, npm := nodeTools(t)
	installSDK(t, npm)
	cmd := exec.Command(node, "--input-type=module", "-e", `
import { waitForPort, waitForURL, waitForProcess, waitForFile, waitForTimeout } from 'e2b'
console.log(JSON.stringify([waitForPort(8000), waitForURL('http://localhost:3000/health'), waitForURL("http://127.0.0.1:81/a b'c", 204),
  waitForProcess('my-daemon'), waitForFile('/tmp/it is ready'), waitForTimeout(5000)].map((r) => r.getCmd())))`)
	cmd.Dir = compatDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var cmds []string
	if err := json.Unmarshal(out, &cmds); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	want := []sandbox.Ready{{Port: 8000}, {URL: "http://localhost:3000/health", Status: 200, Timeout: sandbox.DefaultReadyTimeout},
		{URL: "http://127.0.0.1:81/a b'c", Status: 204, Timeout: sandbox.DefaultReadyTimeout},
		{Process: "my-daemon"}, {File: "/tmp/it is ready"}, {After: 5 * time.Second}}
	for i, c := range cmds {
		if got := readyOf(c); got != want[i] {
			t.Errorf("%s: %+v, want %+v", c, got, want[i])
		}
	}
	if got := readyOf("test -S /run/app.sock"); got.Cmd != "test -S /run/app.sock" {
		t.Errorf("any other command: %+v", got)
	}
}

// TestTemplateUploads: the upload link points back at this server with
// the caller's key; an upload over --max-upload is refused and not kept,
// and what waits for builds is bounded.
func TestTemplateUploads(t *testing.T) {
	env := testmgr.New(t)
	b, err := build.New(context.Background(), env.Manager, env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, Options{Manager: env.Manager, State: state(t, env.Store), Snapshots: env.Snapshots, Builder: b, Images: env.Images})
	key := map[string]string{"X-API-KEY": s.Key}
	link := func(hash string) e2bapi.FileUpload {
		status, body := s.send(t, "GET", "/templates/t/files/"+hash, key, "", nil)
		var u e2bapi.FileUpload
		if status != http.StatusCreated || json.Unmarshal(body, &u) != nil {
			t.Fatalf("upload link: %d %s", status, body)
		}
		return u
	}
	put := func(hash string, n int) int {
		status, _ := s.send(t, "PUT", "/templates/t/files/"+hash, key, "application/octet-stream", make([]byte, n))
		return status
	}
	const mb = 1 << 20 // serve's MaxUpload in these tests
	u := link("aa")
	if u.Present || u.URL != s.URL+"/templates/t/files/aa" || u.Headers["X-API-KEY"] != s.Key {
		t.Errorf("upload link: %+v", u)
	}
	if got := put("aa", mb+1); got != http.StatusRequestEntityTooLarge || link("aa").Present {
		t.Errorf("an upload over the limit: %d, kept %v", got, link("aa").Present)
	}
	for _, h := range []string{"aa", "bb"} {
		if got := put(h, mb); got != http.StatusCreated || !link(h).Present {
			t.Fatalf("upload %s: %d", h, got)
		}
	}
	if got := put("cc", 1); got != http.StatusTooManyRequests {
		t.Errorf("an upload past what may wait: %d", got)
	}
	if got := put("..%2Fx", 1); got != http.StatusBadRequest {
		t.Errorf("a hash that is no hex: %d", got)
	}
}

// imageNames is an image store of bare names.
type imageNames map[string]bool

func (n imageNames) Get(_ context.Context, name string) (*sandbox.Image, error) {
	if !n[name] {
		return nil, sandbox.ErrImageNotFound
	}
	return &sandbox.Image{Refs: []string{name}}, nil
}
func (imageNames) List(context.Context) ([]sandbox.Image, error) { return nil, nil }
func (imageNames) Pull(context.Context, string, sandbox.PullOptions) (*sandbox.Image, error) {
	return nil, sandbox.ErrImageNotFound
}

// TestBaseImage: fromBaseImage() names E2B's base image, else smolvm's,
// and without either says how to make one rather than using the host's.
func TestBaseImage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		have imageNames
		want string
	}{
		{imageNames{e2bapi.BaseImage: true, sandbox.BaseImage: true}, e2bapi.BaseImage},
		{imageNames{sandbox.BaseImage: true, sandbox.DefaultImage: true}, sandbox.BaseImage},
	} {
		if got, err := (&Handler{images: c.have}).baseImage(ctx); got != c.want || err != nil {
			t.Errorf("with %v: %q %v, want %q", c.have, got, err, c.want)
		}
	}
	_, err := (&Handler{images: imageNames{sandbox.DefaultImage: true}}).baseImage(ctx)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "smolvm image build base") {
		t.Errorf("with neither: %v", err)
	}
}
