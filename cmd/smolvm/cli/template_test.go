package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// smolvm template build runs the start command until ready and
// checkpoints it; run --image NAME restores it with the server up.
func TestCLITemplate(t *testing.T) {
	c := newSandboxCLI(t)
	out, errOut, code := c.run("template", "build", "web", "--start", "exec python3 -m http.server 8123 --bind 127.0.0.1",
		"--ready-url", "http://localhost:8123/", "-e", "GREETING=hi")
	if code != 0 || out != "web\n" || !strings.Contains(errOut, "ready after") {
		t.Fatalf("template build: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if ls := c.must("template", "ls"); !strings.Contains(ls, "web") || !strings.Contains(ls, "http.server") {
		t.Errorf("template ls:\n%s", ls)
	}
	var tmpl sandbox.Template
	if err := json.Unmarshal([]byte(c.must("template", "inspect", "web")), &tmpl); err != nil || tmpl.Snapshot == "" || tmpl.Ready.URL == "" {
		t.Errorf("template inspect: %+v, %v", tmpl, err)
	}
	id := strings.TrimSpace(c.must("run", "-d", "--image", "web"))
	// One request, no retry: the server was up before the copy began.
	got := c.must("exec", id, "--", "python3", "-c",
		"import os,urllib.request as u; print(u.urlopen('http://127.0.0.1:8123/').status, os.environ['GREETING'])")
	if got != "200 hi\n" {
		t.Errorf("the copy's server: %q", got)
	}
	if _, errOut, code := c.run("run", "-d", "--image", "web", "--", "true"); code != 125 || !strings.Contains(errOut, "start command") {
		t.Errorf("run a started template with a command: exit %d %s", code, errOut)
	}
	if _, errOut, code := c.run("template", "build", "bad", "--ready-port", "80"); code != 125 || !strings.Contains(errOut, "needs a start command") {
		t.Errorf("a ready check without a start command: exit %d %s", code, errOut)
	}
	if got := c.must("template", "rm", "web"); got != "Removed web\n" {
		t.Errorf("template rm: %q", got)
	}
	if _, errOut, code := c.run("template", "inspect", "web"); code != 125 || !strings.Contains(errOut, "no such template") {
		t.Errorf("inspect after rm: exit %d %s", code, errOut)
	}
}
