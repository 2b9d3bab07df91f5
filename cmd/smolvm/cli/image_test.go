package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/testenv"
)

// imageLayout writes a random two-layer image as an unnamed OCI layout.
func imageLayout(t *testing.T) string {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImageImportLsJSON(t *testing.T) {
	testenv.NeedRoot(t)
	dataDir := t.TempDir()
	c := newCLI(t, dataDir)
	out, errOut, code := c.run("image", "import", imageLayout(t), "--name", "smolvm.local/test:1", "--json")
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	var progress, final int
	var stored sandbox.Image
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var ev struct {
			Progress *image.Progress `json:"progress"`
			Image    *sandbox.Image  `json:"image"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch {
		case ev.Progress != nil:
			progress++
		case ev.Image != nil:
			final++
			stored = *ev.Image
		}
	}
	if progress < 2 || final != 1 || len(stored.Layers) != 2 {
		t.Errorf("import --json: %d progress events, %d images (%+v)", progress, final, stored)
	}

	out, errOut, code = c.run("image", "ls", "--json")
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, errOut)
	}
	var imgs []sandbox.Image
	if err := json.Unmarshal([]byte(out), &imgs); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	if len(imgs) != 2 || !imgs[0].Builtin || imgs[0].Refs[0] != "host" ||
		imgs[1].ID != stored.ID || imgs[1].Refs[0] != "smolvm.local/test:1" || imgs[1].Size == 0 {
		t.Errorf("ls --json = %+v", imgs)
	}

	out, _, code = c.run("image", "ls")
	if code != 0 || !strings.Contains(out, "smolvm.local/test:1") || !strings.Contains(out, stored.ID[7:19]) {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}

	out, _, code = c.run("image", "inspect", "smolvm.local/test:1")
	var inspected struct {
		ID     string       `json:"id"`
		Rootfs image.Rootfs `json:"rootfs"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &inspected) != nil || inspected.ID != stored.ID || len(inspected.Rootfs.LowerDirs) != 2 {
		t.Errorf("inspect: exit %d: %s", code, out)
	}

	out, errOut, code = c.run("image", "rm", "smolvm.local/test:1")
	if code != 0 || !strings.Contains(out, "Removed") {
		t.Fatalf("rm: exit %d: %s%s", code, out, errOut)
	}
	out, _, _ = c.run("image", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &imgs); err != nil || len(imgs) != 1 {
		t.Errorf("ls after rm = %s", out)
	}
}

func TestImageBadInput(t *testing.T) {
	testenv.NeedRoot(t)
	dataDir := t.TempDir()
	c := newCLI(t, dataDir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "pull", "Bad Ref"}, "invalid image reference"},
		{[]string{"image", "import", imageLayout(t), "--name", "UPPER"}, "invalid image reference"},
		{[]string{"image", "import", imageLayout(t)}, "invalid image reference"}, // unnamed image, no --name
		{[]string{"image", "import", filepath.Join(dataDir, "missing.tar")}, "not found"},
		{[]string{"image", "import", dataDir}, "corrupt image"},
		{[]string{"image", "inspect", "nothere"}, "not found"},
		{[]string{"image", "rm", "nothere"}, "not found"},
		{[]string{"image", "rm", "host"}, "builtin"},
	} {
		out, errOut, code := c.run(tc.args...)
		if code != exitFailure {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitFailure)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: stderr %q, want one line with %q", tc.args, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("%v: stdout %q", tc.args, out)
		}
	}
}

func TestImageProgressLines(t *testing.T) {
	var buf bytes.Buffer
	r := &imageProgressLines{w: &buf, state: map[string]image.Progress{}}
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	r.update(image.Progress{Layer: a, Done: 512, Total: 2048, Status: "downloading"})
	r.update(image.Progress{Layer: a, Done: 4096, Total: 4096, Status: "done"})
	r.update(image.Progress{Layer: b, Done: 3 << 20, Status: "extracting"})
	r.update(image.Progress{Layer: b, Done: 3 << 20, Status: "done"})
	r.finish()
	got := buf.String()
	for _, want := range []string{
		"aaaaaaaaaaaa  downloading 512 B / 2.0 KiB",
		"aaaaaaaaaaaa  done        4.0 KiB / 4.0 KiB",
		"bbbbbbbbbbbb  extracting  3.0 MiB",
		"\x1b[1A", // back up over the first layer's line when redrawing two
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%q", want, got)
		}
	}
	if !strings.HasSuffix(got, "\n") {
		t.Errorf("output does not end the last line: %q", got)
	}
}
