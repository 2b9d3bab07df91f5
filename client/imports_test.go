package client

import (
	"strings"
	"testing"

	"smolvm.dev/smolvm/tests/testenv"
)

// TestClientLinksNoRuntime keeps the Go client small: a program that uses
// it must not link the runtime, the servers or the workflow layer, nor what
// only they need (SQLite, nftables, netlink, image registries).
func TestClientLinksNoRuntime(t *testing.T) {
	out := testenv.GoList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "smolvm.dev/smolvm/client")
	forbidden := []string{
		"smolvm.dev/smolvm/runtime/", "smolvm.dev/smolvm/server/", "smolvm.dev/smolvm/workflow/",
		"modernc.org/sqlite", "github.com/google/nftables", "github.com/vishvananda/netlink",
		"github.com/mdlayher/netlink", "github.com/google/go-containerregistry", "github.com/miekg/dns",
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		deps = append(deps, p)
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("client links %s", p)
			}
		}
	}
	t.Logf("non-standard dependencies: %s", strings.Join(deps, " "))
}
