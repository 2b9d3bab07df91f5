package build_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/build"
	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testimage"
	"smolvm.dev/smolvm/tests/testmgr"
)

// world is a builder over a fresh data dir.
type world struct {
	t   testing.TB
	env *testmgr.Env
	b   *build.Builder
}

func newWorld(t testing.TB) *world {
	t.Helper()
	env := testmgr.New(t)
	b, err := build.New(context.Background(), env.Manager, env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, env: env, b: b}
}

// contextDir writes files (path to content) as a build context.
func contextDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// build builds dockerfile in dir, returning the image and the progress.
func (w *world) build(dir, dockerfile string, o build.Options) (*sandbox.Image, string, error) {
	var out bytes.Buffer
	o.Dockerfile, o.Context, o.Progress = []byte(dockerfile), dir, &out
	img, err := w.b.Build(context.Background(), o)
	return img, out.String(), err
}

func (w *world) mustBuild(dir, dockerfile string, o build.Options) (*sandbox.Image, string) {
	w.t.Helper()
	img, out, err := w.build(dir, dockerfile, o)
	if err != nil {
		w.t.Fatalf("build: %v\n%s", err, out)
	}
	return img, out
}

// sh runs a busybox shell command in a sandbox of img (which holds
// /bin/busybox) and returns its output.
func (w *world) sh(img, script string) string {
	w.t.Helper()
	ctx := context.Background()
	m := w.env.Manager
	sb, err := m.Create(ctx, sandbox.CreateOptions{Image: img, Config: sandbox.Config{Cmd: []string{"/bin/busybox", "sleep", "600"}}, Start: true})
	if err != nil {
		w.t.Fatal(err)
	}
	defer m.Remove(ctx, sb.ID, true)
	var out bytes.Buffer
	exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"/bin/busybox", "sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &out})
	if err != nil || exit.Code != 0 {
		w.t.Fatalf("%s: %v %+v\n%s", script, err, exit, out.String())
	}
	return out.String()
}

// withBusybox is a context holding busybox and files.
func withBusybox(t testing.TB, files map[string]string) string {
	dir := contextDir(t, files)
	if err := os.WriteFile(filepath.Join(dir, "busybox"), testimage.Busybox(t), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

const busyboxBase = `FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
`

func TestBuildInstructions(t *testing.T) {
	w := newWorld(t)
	dir := withBusybox(t, map[string]string{
		"hello.txt":      "hello\n",
		"sub/keep.txt":   "keep\n",
		"sub/secret.txt": "secret\n",
		"notes/a.md":     "a\n",
		".dockerignore":  "sub/secret.txt\nnotes\n",
	})
	// A copied directory's own mode is not its destination's.
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	img, _ := w.mustBuild(dir, busyboxBase+`
ENV GREETING=hi
ARG WHO=world
ARG UNUSED
WORKDIR /app
COPY hello.txt sub ./
RUN echo "$GREETING $WHO" > out.txt && rm /bin/ls && mkdir -p /etc && echo 'u:x:1000:1000::/home/u:/bin/sh' > /etc/passwd
COPY --chown=u:1000 hello.txt /home/u/
ADD hello.txt /added.txt
RUN ["/bin/sh", "-c", "echo exec form >> /app/out.txt"]
RUN mkdir -p /d && echo 1 > /d/old
RUN rm -r /d && mkdir /d && echo 2 > /d/new
EXPOSE 8080 53/udp
LABEL org.example=yes
USER u
ENTRYPOINT ["/bin/cat"]
CMD ["/app/out.txt"]
`, build.Options{Tags: []string{"inst"}, Args: map[string]string{"WHO": "builder"}})

	// ENTRYPOINT would run cat as the sandbox's main command: a child
	// image without it (FROM a stored image) keeps the sandbox up.
	w.mustBuild(dir, "FROM inst\nENTRYPOINT []\n", build.Options{Tags: []string{"inst-shell"}})
	got := w.sh("inst-shell", `stat -c '%a' / /app; cat /app/out.txt; ls /app; ls /home/u; stat -c '%u:%g' /home/u/hello.txt; cat /added.txt; test -e /bin/ls || echo no ls; test -e /app/secret.txt || echo ignored; test -e /app/notes || echo ignored dir; ls /d`)
	want := "755\n755\nhi builder\nexec form\nhello.txt\nkeep.txt\nout.txt\nhello.txt\n1000:1000\nhello\nno ls\nignored\nignored dir\nnew\n"
	if got != want {
		t.Errorf("files:\n%s\nwant:\n%s", got, want)
	}
	// What the sandboxes' starts put in their upper directories (mount
	// points, /.smolvm, /etc/machine-id) is in no layer.
	for _, l := range w.env.Images.Layers(img) {
		for _, p := range []string{".smolvm", "proc", "dev", "sys", "etc/machine-id", "etc/resolv.conf"} {
			if _, err := os.Lstat(filepath.Join(l.Dir, p)); err == nil {
				t.Errorf("layer %s has /%s", l.DiffID, p)
			}
		}
	}
	cf, err := w.env.Images.ConfigFile(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "u" || c.WorkingDir != "/app" || strings.Join(c.Entrypoint, " ") != "/bin/cat" || strings.Join(c.Cmd, " ") != "/app/out.txt" ||
		c.Labels["org.example"] != "yes" || len(c.ExposedPorts) != 2 || !slicesHas(c.Env, "GREETING=hi") || slicesHasPrefix(c.Env, "WHO=") {
		t.Errorf("config: %+v", c)
	}
	if len(cf.History) != 18 { // every instruction but FROM
		t.Errorf("history has %d entries, want 18: %+v", len(cf.History), cf.History)
	}
}

func slicesHas(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

func slicesHasPrefix(s []string, p string) bool {
	for _, e := range s {
		if strings.HasPrefix(e, p) {
			return true
		}
	}
	return false
}

func TestBuildMultiStage(t *testing.T) {
	w := newWorld(t)
	dir := withBusybox(t, nil)
	df := busyboxBase + `RUN echo built > /artifact && chown 1234:5678 /artifact && mkdir /out && echo two > /out/two
FROM builder AS tested
RUN test "$(cat /artifact)" = built
FROM scratch
COPY --from=builder /bin/busybox /bin/busybox
COPY --from=0 /artifact /out/ /result/
`
	df = strings.Replace(df, "FROM scratch\n", "FROM scratch AS builder\n", 1)
	w.mustBuild(dir, df, build.Options{Tags: []string{"multi"}})
	// Files from a stage keep their owner.
	if got := w.sh("multi", "/bin/busybox ls /result; /bin/busybox cat /result/artifact; /bin/busybox stat -c %u:%g /result/artifact"); got != "artifact\ntwo\nbuilt\n1234:5678\n" {
		t.Errorf("final stage has %q", got)
	}
	// --target stops at a stage, and the stage it names alone is built.
	_, out := w.mustBuild(dir, df, build.Options{Tags: []string{"tested"}, Target: "tested"})
	if strings.Contains(out, "COPY --from") {
		t.Errorf("--target tested built the last stage:\n%s", out)
	}
	if got := w.sh("tested", "cat /artifact"); got != "built\n" {
		t.Errorf("target stage has %q", got)
	}
}

func TestBuildPulledBase(t *testing.T) {
	w := newWorld(t)
	reg := testimage.Serve(t)
	ref, _ := reg.Push(t, "base", map[string]string{"/etc/base.txt": "from the registry\n"})
	dir := withBusybox(t, nil)
	w.mustBuild(dir, "FROM "+ref+`
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox cat /etc/base.txt > /copied"]
`, build.Options{Tags: []string{"pulled"}})
	if got := w.sh("pulled", "/bin/busybox cat /copied"); got != "from the registry\n" {
		t.Errorf("got %q", got)
	}
}

// TestBuildCache rebuilds: unchanged, every step is cached; after a one
// line change to a copied file, the steps before it are cached and it and
// the later ones run.
func TestBuildCache(t *testing.T) {
	w := newWorld(t)
	dir := withBusybox(t, map[string]string{"app/main.sh": "echo one\necho two\n", "app/data": "x\n"})
	df := busyboxBase + `ARG MODE=fast
COPY app/data /data
COPY app/main.sh /main.sh
RUN sh /main.sh > /out
CMD ["cat", "/out"]
`
	first, out := w.mustBuild(dir, df, build.Options{Tags: []string{"cached"}})
	if n := strings.Count(out, "CACHED"); n != 0 {
		t.Fatalf("first build had %d cached steps:\n%s", n, out)
	}
	again, out := w.mustBuild(dir, df, build.Options{Tags: []string{"cached"}})
	if n := strings.Count(out, "CACHED"); n != 5 {
		t.Errorf("rebuild: %d cached steps, want 5:\n%s", n, out)
	}
	if first.ID != again.ID {
		t.Errorf("a rebuild of nothing changed made image %s, then %s", first.ID, again.ID)
	}
	if err := os.WriteFile(filepath.Join(dir, "app/main.sh"), []byte("echo one\necho three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out = w.mustBuild(dir, df, build.Options{Tags: []string{"cached"}})
	if n := strings.Count(out, "CACHED"); n != 3 || !strings.Contains(out, "[5/6] COPY app/main.sh /main.sh\n#5 DONE") {
		t.Errorf("after a change to main.sh: %d cached, want 3 (COPY busybox, RUN, COPY data):\n%s", n, out)
	}
	if got := w.sh("cached", "cat /out"); got != "one\nthree\n" {
		t.Errorf("rebuilt image has %q", got)
	}
	// A build arg changes every step after its ARG.
	_, out = w.mustBuild(dir, df, build.Options{Tags: []string{"cached"}, Args: map[string]string{"MODE": "slow"}})
	if n := strings.Count(out, "CACHED"); n != 2 {
		t.Errorf("after --build-arg MODE=slow: %d cached, want 2:\n%s", n, out)
	}
	_, out = w.mustBuild(dir, df, build.Options{Tags: []string{"cached"}, NoCache: true})
	if n := strings.Count(out, "CACHED"); n != 0 {
		t.Errorf("--no-cache: %d cached:\n%s", n, out)
	}
}

func TestBuildBadInstructions(t *testing.T) {
	w := newWorld(t)
	dir := contextDir(t, map[string]string{"f": "x"})
	for _, tc := range []struct{ df, want string }{
		{"FROM scratch\nCOPY f /f\nHEALTHCHECK CMD true\n", "Dockerfile:3: HEALTHCHECK is not supported"},
		{"FROM scratch\nRUN --mount=type=cache,target=/c true\n", "Dockerfile:2: RUN --mount is not supported"},
		{"FROM scratch\nVOLUME /data\n", "Dockerfile:2: VOLUME is not supported"},
		{"FROM scratch\nCOPY --chmod=755 f /f\n", "Dockerfile:2: COPY --chmod is not supported"},
		{"FROM scratch\nBOGUS x\n", "line 2: unknown instruction: BOGUS"},
		{"FROM scratch\nCOPY missing /m\n", "Dockerfile:2: COPY missing /m: build step failed: missing: not found"},
		{"FROM scratch\nADD https://example.com/x /x\n", "Dockerfile:2: ADD https://example.com/x /x: build step failed: ADD from a URL is not supported"},
		{"FROM scratch\nRUN true\n", "Dockerfile:2: RUN true: build step failed: the stage has no files"},
		{"FROM scratch\nCOPY f /f\n", ""},
	} {
		_, out, err := w.build(dir, tc.df, build.Options{Target: ""})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.df, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want %q\n%s", tc.df, err, tc.want, out)
		case tc.want != "" && !errors.Is(err, build.ErrDockerfile) && !errors.Is(err, build.ErrStep):
			t.Errorf("%q: %v is neither ErrDockerfile nor ErrStep", tc.df, err)
		}
	}
	if _, _, err := w.build(dir, "FROM scratch\n", build.Options{Target: "nope"}); err == nil || !strings.Contains(err.Error(), "--target nope: no such stage") {
		t.Errorf("--target nope: %v", err)
	}
}

// TestBuildRunFails: the exit code and output are in the error; the tag
// is not stored, no sandbox or scratch directory is left.
func TestBuildRunFails(t *testing.T) {
	w := newWorld(t)
	dir := withBusybox(t, nil)
	_, out, err := w.build(dir, busyboxBase+"RUN echo to stdout; echo oops >&2; exit 3\n", build.Options{Tags: []string{"failed"}})
	if err == nil || !strings.Contains(err.Error(), "exit code: 3") || !strings.Contains(err.Error(), "oops") || !strings.Contains(err.Error(), "Dockerfile:4") {
		t.Fatalf("error %v\n%s", err, out)
	}
	if !strings.Contains(out, "oops") || !strings.Contains(out, "ERROR") {
		t.Errorf("progress does not show the output and the error:\n%s", out)
	}
	if _, err := w.env.Images.Get(context.Background(), "failed"); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("the failed build's tag: %v", err)
	}
	if sbs, _ := w.env.Manager.List(context.Background()); len(sbs) != 0 {
		t.Errorf("sandboxes left: %d", len(sbs))
	}
	left, _ := filepath.Glob(filepath.Join(w.env.Dir, "build", "*"))
	if len(left) != 0 {
		t.Errorf("scratch left: %v", left)
	}
}

// TestSaveLoads: a built image saved in both formats is what skopeo
// reads, with its config.
func TestSaveLoads(t *testing.T) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("skopeo is missing (scripts/test.sh installs it)")
		}
		t.Skip("no skopeo (apt-get install skopeo)")
	}
	w := newWorld(t)
	dir := withBusybox(t, map[string]string{"f": "x\n"})
	w.mustBuild(dir, busyboxBase+"COPY f /f\nRUN rm /bin/ls\nCMD [\"cat\", \"/f\"]\nEXPOSE 80\n", build.Options{Tags: []string{"saved:1"}})
	for _, tc := range []struct{ format, transport string }{{image.FormatOCI, "oci-archive:"}, {image.FormatDocker, "docker-archive:"}} {
		out := filepath.Join(t.TempDir(), "img.tar")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.env.Images.Save(context.Background(), "saved:1", f, tc.format); err != nil {
			t.Fatal(err)
		}
		f.Close()
		b, err := exec.Command(skopeo, "inspect", "--config", tc.transport+out).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo inspect %s: %v\n%s", tc.format, err, b)
		}
		if s := string(b); !strings.Contains(s, `"/f"`) || !strings.Contains(s, `"80/tcp"`) || strings.Count(s, "sha256:") != 4 {
			t.Errorf("%s: skopeo reads:\n%s", tc.format, s)
		}
		// And smolvm reads it back: same layers' files.
		if tc.format == image.FormatOCI {
			layout := t.TempDir()
			if b, err := exec.Command("tar", "-xf", out, "-C", layout).CombinedOutput(); err != nil {
				t.Fatalf("untar: %v\n%s", err, b)
			}
			out = layout
		}
		img, err := w.env.Images.Import(context.Background(), out, "reloaded-"+tc.format, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.sh(img.ID, "cat /f; test -e /bin/ls || echo gone"); got != "x\ngone\n" {
			t.Errorf("%s reimported: %q", tc.format, got)
		}
	}
}

// TestStaleScratch: what a killed build left (a view still mounted) is
// unmounted and removed by the next builder, and what it showed stays.
func TestStaleScratch(t *testing.T) {
	w := newWorld(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	layer := t.TempDir()
	if err := os.WriteFile(filepath.Join(layer, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(w.env.Dir, "build", fmt.Sprintf(".tmp-%d-view-1", dead.Process.Pid))
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(layer, stale, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(stale, unix.MNT_DETACH) })
	if _, err := build.New(context.Background(), w.env.Manager, w.env.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale scratch: %v", err)
	}
	if _, err := os.Stat(filepath.Join(layer, "kept")); err != nil {
		t.Errorf("the view's files: %v", err)
	}
}

// TestBuildCacheInputs: a COPY's key is what it copies: an ignored file's
// change, or a new time alone, keeps it cached; a copied file's content
// or mode does not.
func TestBuildCacheInputs(t *testing.T) {
	w := newWorld(t)
	dir := contextDir(t, map[string]string{"kept": "1\n", "skipped": "1\n", ".dockerignore": "skipped\n"})
	const df = "FROM scratch\nCOPY . /ctx/\n"
	cached := func(what string, change func()) {
		t.Helper()
		change()
		_, out := w.mustBuild(dir, df, build.Options{})
		if got := strings.Contains(out, "CACHED"); got != (what == "cached") {
			t.Errorf("want %s:\n%s", what, out)
		}
	}
	cached("built", func() {})
	cached("cached", func() { os.WriteFile(filepath.Join(dir, "skipped"), []byte("2\n"), 0o644) })
	cached("cached", func() {
		when := time.Now().Add(time.Hour)
		os.Chtimes(filepath.Join(dir, "kept"), when, when)
	})
	cached("built", func() { os.WriteFile(filepath.Join(dir, "kept"), []byte("2\n"), 0o644) })
	cached("built", func() { os.Chmod(filepath.Join(dir, "kept"), 0o600) })
	cached("built", func() { os.WriteFile(filepath.Join(dir, "new"), []byte("3\n"), 0o644) })
}

// TestBuildSymlinkEscapes: a stage's symlinks to a host directory neither
// read the host's files into an image nor lead a COPY's writes there.
func TestBuildSymlinkEscapes(t *testing.T) {
	w := newWorld(t)
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := withBusybox(t, nil)
	stage := busyboxBase + "RUN mkdir -p /a /b/x && ln -s " + host + " /a/x && echo written > /b/x/f\n"
	stage = strings.Replace(stage, "FROM scratch\n", "FROM scratch AS evil\n", 1)
	_, out, err := w.build(dir, stage+"FROM scratch\nCOPY --from=evil /a/x/secret /stolen\n", build.Options{})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("COPY through a stage's symlink to the host: %v\n%s", err, out)
	}
	_, out, err = w.build(dir, stage+"FROM scratch\nCOPY --from=evil /a /b /dst/\n", build.Options{Tags: []string{"merged"}})
	if _, serr := os.Stat(filepath.Join(host, "f")); serr == nil {
		t.Fatalf("a COPY wrote into the host directory a stage's symlink named (build: %v)\n%s", err, out)
	}
}

// TestBuildAddArchive: ADD unpacks a local archive (owners, links, modes
// kept); names climbing out of it stay inside, and a symlink it carries
// leads no write to the host.
func TestBuildAddArchive(t *testing.T) {
	w := newWorld(t)
	host := t.TempDir()
	dir := withBusybox(t, map[string]string{"plain.txt": "not an archive\n"})
	writeTarGz(t, filepath.Join(dir, "pkg.tar.gz"), []*tar.Header{
		{Name: "pkg/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000},
		{Name: "pkg/tool", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 1000, Gid: 1001, Size: 5},
		{Name: "pkg/link", Typeflag: tar.TypeSymlink, Linkname: "tool"},
		{Name: "pkg/hard", Typeflag: tar.TypeLink, Linkname: "pkg/tool"},
		{Name: "../../up.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
	})
	writeTarGz(t, filepath.Join(dir, "evil.tar.gz"), []*tar.Header{
		{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: host},
		{Name: "esc/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
	})
	w.mustBuild(dir, busyboxBase+"ADD pkg.tar.gz /opt/\nADD plain.txt /plain.txt\n", build.Options{Tags: []string{"added"}})
	got := w.sh("added", "stat -c '%n %a %u:%g' /opt/pkg /opt/pkg/tool; readlink /opt/pkg/link; cat /opt/pkg/hard /opt/up.txt /plain.txt; stat -c %h /opt/pkg/tool")
	want := "/opt/pkg 750 1000:1000\n/opt/pkg/tool 755 1000:1001\ntool\nbody\nbody\nnot an archive\n2\n"
	if got != want {
		t.Errorf("unpacked:\n%s\nwant:\n%s", got, want)
	}
	_, out, err := w.build(dir, busyboxBase+"ADD evil.tar.gz /opt/\n", build.Options{})
	if _, serr := os.Stat(filepath.Join(host, "f")); serr == nil || err == nil {
		t.Errorf("an archive writing through its own symlink to the host: %v\n%s", err, out)
	}
}

// writeTarGz writes entries, each regular one holding "body\n".
func writeTarGz(t *testing.T, p string, entries []*tar.Header) {
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("body\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}
