package cli

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"smolvm.dev/smolvm/server/httpapi"
)

// serveAPI runs the API for c's data dir on a Unix socket, as smolvm
// serve does, and returns its SMOLVM_HOST.
func serveAPI(t *testing.T, c *testCLI) string {
	t.Helper()
	a := &app{dataDir: c.dataDir, runsc: c.runsc, self: c.self}
	e, err := a.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	tok, err := httpapi.LoadToken(c.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMOLVM_TOKEN", tok)
	sock := filepath.Join(t.TempDir(), SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: httpapi.New(httpapi.Options{Manager: e.mgr, Images: e.images, Snapshots: e.snaps, Token: tok, TempDir: t.TempDir()})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "unix://" + sock
}

// TestCLIRemoteMatchesDirect runs the same command lines directly and
// through a server (SMOLVM_HOST): output, errors and exit statuses must be
// the same, but for the sandboxes' names and IDs.
func TestCLIRemoteMatchesDirect(t *testing.T) {
	c := newSandboxCLI(t)
	t.Cleanup(func() { c.host = ""; c.run("volume", "rm", "-f", "box-direct-vol", "box-remote-vol") })
	host := serveAPI(t, c)
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("data\n"), 0o644)
	ids := regexp.MustCompile(`\b[0-9a-f]{12}\b`)

	script := func(name, outDir string) [][]string {
		return [][]string{
			{"run", "--rm", "--", "sh", "-c", "echo hi; echo oops >&2; exit 5"},
			{"run", "--rm", "--", "no-such-command"},
			{"run", "-d", "--name", name, "--memory", "256m"},
			{"exec", name, "--", "sh", "-c", "echo out; echo err >&2; exit 7"},
			{"exec", name, "--", "no-such-command"},
			{"exec", "-i", name, "--", "wc", "-c"},
			{"exec", "--timeout", "200ms", name, "--", "sleep", "5"},
			{"cp", in, name + ":/tmp/in.txt"},
			{"cp", name + ":/tmp/in.txt", filepath.Join(outDir, "out.txt")},
			{"cp", name + ":/tmp/missing", filepath.Join(outDir, "missing")},
			{"exec", "ghost", "--", "true"},
			{"rm", name},
			{"stop", name},
			{"exec", name, "--", "true"},
			{"rm", name},
			{"run", "--rm", "--backend", "gvisor", "--", "echo", "on gvisor"},
			{"run", "-d", "--backend", "nope"},
			{"volume", "create", "--size", "16m", name + "-vol"},
			{"run", "--rm", "-v", name + "-vol:/v", "--", "sh", "-c", "echo in > /v/f; cat /v/f"},
			{"run", "-d", "--name", name + "-m", "-v", name + "-vol:/v:ro"},
			{"volume", "rm", name + "-vol"},
			{"rm", "-f", name + "-m"},
			{"volume", "rm", name + "-vol"},
			{"volume", "rm", name + "-vol"},
		}
	}
	type result struct {
		out, err string
		code     int
	}
	run := func(remote bool, name string) ([]result, string) {
		c.host = ""
		if remote {
			c.host = host
		}
		outDir := t.TempDir()
		var rs []result
		for _, args := range script(name, outDir) {
			out, errOut, code := c.runIn("12345", args...)
			norm := func(s string) string { return ids.ReplaceAllString(strings.ReplaceAll(s, name, "NAME"), "ID") }
			rs = append(rs, result{norm(out), norm(errOut), code})
		}
		b, _ := os.ReadFile(filepath.Join(outDir, "out.txt"))
		return rs, string(b)
	}
	direct, directFile := run(false, "box-direct")
	remote, remoteFile := run(true, "box-remote")
	for i, args := range script("NAME", "DIR") {
		if direct[i] != remote[i] {
			t.Errorf("smolvm %s:\n direct: %+v\n remote: %+v", strings.Join(args, " "), direct[i], remote[i])
		}
	}
	if directFile != "data\n" || remoteFile != directFile {
		t.Errorf("cp round trip: direct %q, remote %q", directFile, remoteFile)
	}
	// The scripts must have exercised what they claim.
	if direct[0].code != 5 || direct[0].out != "hi\n" || direct[1].code != 127 || direct[3].code != 7 || direct[4].code != 127 ||
		direct[5].out != "5\n" || direct[6].code != 137 || direct[10].code != 125 ||
		direct[18].out != "in\n" || direct[20].code != 125 || direct[22].code != 0 || direct[23].code != 125 {
		t.Errorf("direct results are not what the script expects: %+v", direct)
	}

	// ls --json, from both sides at once, over the same sandboxes.
	c.host = ""
	c.must("run", "-d", "--name", "listed", "--timeout", "0")
	want := c.must("ls", "--json")
	c.host = host
	if got := c.must("ls", "--json"); got != want {
		t.Errorf("ls --json differs:\n direct: %s\n remote: %s", want, got)
	}

	// The remote runs really went through a server: without one, they fail.
	c.host = "unix://" + filepath.Join(t.TempDir(), "nobody.sock")
	if _, errOut, code := c.run("ls"); code != 125 || !strings.Contains(errOut, "smolvm server") {
		t.Errorf("ls against no server: %d %q", code, errOut)
	}
	c.host = ""
}
