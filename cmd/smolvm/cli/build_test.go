package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
)

// TestCLIBuild: smolvm build with -f -, tags, build args and plain
// progress; the image runs and saves; bad input exits 125 with one line.
func TestCLIBuild(t *testing.T) {
	c := newSandboxCLI(t)
	dir := busyboxContext(t)
	df := "FROM scratch\nCOPY busybox /bin/busybox\nARG X=default\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"echo $X > /x\"]\n"
	out, errOut, code := c.runIn(df, "build", "-f", "-", "-t", "clib", "--build-arg", "X=given", "--net", "none", "--progress", "plain", dir)
	if code != 0 || !strings.HasPrefix(out, "sha256:") || !strings.Contains(errOut, "#2 [2/3] COPY busybox /bin/busybox\n") || !strings.Contains(errOut, "naming to docker.io/library/clib:latest") {
		t.Fatalf("build: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if got := c.must("run", "--rm", "--image", "clib", "--", "/bin/busybox", "cat", "/x"); got != "given\n" {
		t.Errorf("the built image's /x: %q", got)
	}
	// Quiet, and all cached: only the ID.
	out2, errOut, code := c.runIn(df, "build", "-f", "-", "-t", "clib", "--build-arg", "X=given", "--net", "none", "--progress", "quiet", dir)
	if code != 0 || errOut != "" || strings.TrimSpace(out2) == "" {
		t.Errorf("quiet build: exit %d, stdout %q, stderr %q", code, out2, errOut)
	}
	// The steps' cached images are listed with -a only.
	if ls := c.must("image", "ls"); strings.Contains(ls, "build step") || !strings.Contains(ls, "clib:latest") {
		t.Errorf("image ls:\n%s", ls)
	}
	if ls := c.must("image", "ls", "-a"); !strings.Contains(ls, "build step") {
		t.Errorf("image ls -a:\n%s", ls)
	}
	// Pruning the cache keeps the tagged image whole: it is saved,
	// loaded and run below.
	if out := c.must("image", "prune"); !strings.HasPrefix(out, "Removed ") || strings.HasPrefix(out, "Removed 0 ") {
		t.Errorf("image prune: %q", out)
	}
	if ls := c.must("image", "ls", "-a"); strings.Contains(ls, "build step") || !strings.Contains(ls, "clib:latest") {
		t.Errorf("image ls -a after prune:\n%s", ls)
	}
	saved := filepath.Join(t.TempDir(), "clib.tar")
	c.must("image", "save", "clib", "-o", saved, "--format", "docker")
	c.must("image", "import", saved, "--name", "clib-loaded")
	if got := c.must("run", "--rm", "--image", "clib-loaded", "--", "/bin/busybox", "cat", "/x"); got != "given\n" {
		t.Errorf("the saved and loaded image's /x: %q", got)
	}
	for _, tc := range []struct {
		df   string
		args []string
		want string
	}{
		{"FROM scratch\nSTOPSIGNAL 9\n", nil, "Dockerfile:2: STOPSIGNAL is not supported"},
		{df, []string{"--progress", "fancy"}, "--progress fancy"},
		{"FROM scratch\nCOPY busybox /b\nRUN [\"/b\", \"false\"]\n", nil, "exit code: 1"},
	} {
		args := append([]string{"build", "-f", "-", "--net", "none"}, tc.args...)
		_, errOut, code := c.runIn(tc.df, append(args, dir)...)
		if code != 125 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q %v: exit %d, stderr %q, want 125 and %q", tc.df, tc.args, code, errOut, tc.want)
		}
	}
}

// busyboxContext is a build context holding the host's busybox.
func busyboxContext(t *testing.T) string {
	dir := t.TempDir()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Skip("no /usr/bin/busybox")
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCLIBuildNet: RUN steps reach what --net egress allows, in a closed
// test world; with --net none, nothing. By address, with nc: a static
// busybox cannot resolve names (glibc's NSS), and its wget crashes.
func TestCLIBuildNet(t *testing.T) {
	c := newSandboxCLI(t)
	w := nettest.New(t)
	c.self = testenv.Smolvm(t)
	t.Setenv("SMOLVM_NET_NETNS", w.HostNS)
	t.Setenv("SMOLVM_NET_RESOLVER", w.Resolver)
	dir := busyboxContext(t)
	// busybox nc, not wget: Debian's static busybox cannot resolve names
	// (static glibc, NSS), and its wget segfaults even for an address.
	fetch := "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 " + nettest.Internet4 + " 80 > /page"
	df := "FROM scratch\nCOPY busybox /bin/busybox\nSHELL [\"/bin/busybox\", \"sh\", \"-c\"]\nRUN " + fetch + "\n"
	if _, errOut, code := c.runIn(df, "build", "-f", "-", "-t", "fetched", "--allow-cidr", nettest.Internet4+"/32", dir); code != 0 {
		t.Fatalf("build with egress: exit %d: %s", code, errOut)
	}
	if got := c.must("run", "--rm", "--image", "fetched", "--", "/bin/busybox", "cat", "/page"); !strings.HasSuffix(got, "\r\n\r\ninternet") {
		t.Errorf("fetched %q", got)
	}
	if _, errOut, code := c.runIn(df, "build", "-f", "-", "--no-cache", "--net", "none", dir); code != 125 || !strings.Contains(errOut, "exit code: 1") {
		t.Errorf("build with --net none: exit %d: %s", code, errOut)
	}
}
