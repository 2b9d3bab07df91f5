package main

import (
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"
)

// TestLinks keeps Kubernetes and smolvm's runtime apart: smolvm-kube
// reaches nodes only through client/ (its gateway serves the servers over
// the cluster, so it links them, but no runtime that runs sandboxes), and
// smolvm links no Kubernetes library (their package inits cost every CLI
// command ~40 ms: AGENTS.md).
func TestLinks(t *testing.T) {
	for _, tc := range []struct {
		cmd       string
		forbidden []string
	}{
		{"smolvm-kube", []string{"smolvm.dev/smolvm/runtime/manager", "smolvm.dev/smolvm/runtime/backend", "smolvm.dev/smolvm/cmd/smolvm/cli"}},
		{"smolvm", []string{"k8s.io/", "sigs.k8s.io/"}},
	} {
		out := testenv.GoList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "smolvm.dev/smolvm/cmd/"+tc.cmd)
		for _, p := range strings.Fields(string(out)) {
			for _, f := range tc.forbidden {
				if strings.HasPrefix(p, f) {
					t.Errorf("%s links %s", tc.cmd, p)
				}
			}
		}
	}
}
