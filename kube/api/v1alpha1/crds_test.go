package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"
)

// TestCRDsMatchTypes runs doc.go's go:generate command (the pinned
// controller-gen) into a temporary directory and compares what it writes
// with deploy/crds and the deepcopy file.
func TestCRDsMatchTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen")
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(doc), "\n") {
		if cmd, ok := strings.CutPrefix(line, "//go:generate "); ok {
			args = strings.Fields(cmd)
		}
	}
	if len(args) < 2 || args[0] != "go" {
		t.Fatal("doc.go has no //go:generate go … line")
	}
	out := t.TempDir()
	for i, a := range args {
		if strings.HasPrefix(a, "output:crd:dir=") {
			args[i] = "output:crd:dir=" + filepath.Join(out, "crds")
		}
	}
	args = append(args, "output:object:dir="+out)
	cmd := exec.Command(args[0], args[1:]...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, b)
	}
	crds := filepath.Join(testenv.Root(), "deploy", "crds")
	want, err := filepath.Glob(filepath.Join(out, "crds", "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("controller-gen wrote no CRDs (%v)", err)
	}
	have, _ := filepath.Glob(filepath.Join(crds, "*.yaml"))
	if len(have) != len(want) {
		t.Errorf("deploy/crds has %d files, the types make %d: run go generate ./kube/api", len(have), len(want))
	}
	for _, w := range want {
		same(t, w, filepath.Join(crds, filepath.Base(w)))
	}
	same(t, filepath.Join(out, "zz_generated.deepcopy.go"), "zz_generated.deepcopy.go")
}

func same(t *testing.T, generated, committed string) {
	t.Helper()
	g, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile(committed)
	if err != nil {
		t.Errorf("%v: run go generate ./kube/api", err)
		return
	}
	if !bytes.Equal(g, c) {
		t.Errorf("%s differs from what the types generate: run go generate ./kube/api", committed)
	}
}
