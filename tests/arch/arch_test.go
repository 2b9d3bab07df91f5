// Package arch keeps smolvm's architecture as docs/architecture.md draws
// it: what each layer may import (TestLayers, in the spirit of Tailscale's
// deptest), and a doc that names every package (TestDocNamesEveryPackage).
package arch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"
)

const module = "smolvm.dev/smolvm/"

// rule says what the packages of one layer may import of smolvm's own.
// A package follows the rule of the longest layer that holds it.
type rule struct {
	// layer is a package ("client") or a folder ("server/").
	layer string
	// only, when set, lists all a layer may import; not what it may not.
	// Entries are prefixes like layer.
	only, not []string
	why       string
}

var rules = []rule{
	{layer: "errdefs", not: []string{""}, why: "the error classes import nothing of smolvm"},
	{layer: "sandbox", only: []string{"errdefs"}, why: "the contract imports only errdefs"},
	{layer: "api", only: []string{"api/", "sandbox", "errdefs", "internal/units", "internal/names"}, why: "wire types are the contract's, over HTTP"},
	{layer: "client", not: []string{"runtime/", "server/", "workflow/", "kube/", "cmd/", "tests/"}, why: "the Go SDK links no runtime, server or workflow"},
	{layer: "runtime/", not: []string{"server/", "workflow/", "kube/", "client", "cmd/", "tests/"}, why: "the runtime serves the layers above, never imports them"},
	{layer: "server/", not: []string{"runtime/backend", "runtime/guest", "kube/", "cmd/", "tests/"}, why: "servers reach sandboxes through the runtime's interfaces, never a backend or the guest"},
	{layer: "workflow/", not: []string{"runtime/", "server/", "kube/", "cmd/", "tests/"}, why: "the workflow layer works over the contract, not the runtime's internals"},
	{layer: "kube/", not: []string{"runtime/", "workflow/", "cmd/", "tests/"}, why: "Kubernetes reaches nodes through client/, and serves the servers over the cluster, never the runtime"},
	{layer: "internal/", not: []string{"runtime/", "server/", "workflow/", "kube/", "client", "cmd/", "tests/"}, why: "internal/ holds leaf helpers"},
	// The wiring roots and the test helpers, which assemble the layers.
	{layer: "cmd/"},
	{layer: "tests/", why: "the cross-cutting suites and the test helpers"},
	{layer: "kube/kubetest", why: "a test helper: a real kube-apiserver for kube/'s tests"},
	{layer: "workflow/forge/forgetest", why: "a test helper: local forges, a real Gitea among them"},
	{layer: "scripts"}, {layer: "sdk"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Dir        string
}

// packages lists smolvm's packages (without tests' imports).
func packages(t *testing.T) []pkg {
	t.Helper()
	out := testenv.GoList(t, "-json=ImportPath,Imports,Dir", "./...")
	var pkgs []pkg
	for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// holds reports whether layer (a package or a folder) holds path.
func holds(layer, path string) bool {
	if strings.HasSuffix(layer, "/") {
		return strings.HasPrefix(path, layer)
	}
	return path == layer || strings.HasPrefix(path, layer+"/")
}

// ruleOf returns the rule of the longest layer holding path.
func ruleOf(path string) (rule, bool) {
	var best rule
	found := false
	for _, r := range rules {
		if holds(r.layer, path) && len(r.layer) >= len(best.layer) {
			best, found = r, true
		}
	}
	return best, found
}

func anyHolds(layers []string, path string) bool {
	return slices.ContainsFunc(layers, func(l string) bool { return l == "" || holds(l, path) })
}

func TestLayers(t *testing.T) {
	for _, p := range packages(t) {
		r, ok := ruleOf(p.ImportPath)
		if !ok {
			t.Errorf("%s is in no layer: add it to rules", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if holds(r.layer, imp) {
				continue // within its own layer
			}
			if anyHolds(r.not, imp) || (r.only != nil && !anyHolds(r.only, imp)) {
				t.Errorf("%s: %s may not import %s (%s)", p.ImportPath, r.layer, imp, r.why)
			}
		}
	}
}

// TestDocNamesEveryPackage fails when a package is missing from
// docs/architecture.md, so that a newcomer finds every one there.
func TestDocNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testenv.Root(), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range packages(t) {
		if !bytes.Contains(doc, []byte("`"+p.ImportPath+"`")) {
			t.Errorf("docs/architecture.md does not name `%s`", p.ImportPath)
		}
	}
}
