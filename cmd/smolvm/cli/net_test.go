package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
)

// TestCLINet drives network policy from the command line in a closed test
// world: run with a policy, inspect, net update, net events, and bad input.
func TestCLINet(t *testing.T) {
	c := newSandboxCLI(t)
	w := nettest.New(t)
	c.self = testenv.Smolvm(t)
	t.Setenv("SMOLVM_NET_NETNS", w.HostNS)
	t.Setenv("SMOLVM_NET_RESOLVER", w.Resolver)

	c.must("run", "-d", "--name", "web", "--net", "egress", "--allow-host", "allowed.test", "-p", "8000")
	curl := func(url string) string {
		out, _, code := c.run("exec", "web", "--", "sh", "-c", "curl -sS -m 3 "+url+" 2>/dev/null")
		if code != 0 {
			return fmt.Sprint("exit ", code)
		}
		return out
	}
	if got := curl("http://allowed.test/"); got != "internet" {
		t.Errorf("allowed name: %q", got)
	}
	if got := curl("http://other.test/"); got != "exit 6" {
		t.Errorf("disallowed name: %q", got)
	}

	var views []struct {
		Config struct {
			Network sandbox.Network `json:"network"`
		} `json:"config"`
		State sandbox.NetworkState `json:"network_state"`
	}
	if err := json.Unmarshal([]byte(c.must("inspect", "web")), &views); err != nil {
		t.Fatal(err)
	}
	v := views[0]
	if v.Config.Network.Mode != sandbox.NetEgress || len(v.State.Ports) != 1 || v.State.Ports[0].Port != 8000 || v.State.Ports[0].HostPort == 0 ||
		!v.State.Addrs.Sandbox4.IsValid() || v.State.Counters == nil || v.State.Counters.RxBytes == 0 {
		t.Errorf("inspect: %+v", v)
	}

	c.must("net", "update", "web", "--net", "egress", "--allow-host", "other.test")
	if got := curl("http://other.test/"); got != "other" {
		t.Errorf("after net update, newly allowed name: %q", got)
	}
	if got := curl("http://allowed.test/"); got != "exit 6" {
		t.Errorf("after net update, no longer allowed name: %q", got)
	}

	var evs []sandbox.NetworkEvent
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(evs) == 0; time.Sleep(100 * time.Millisecond) {
		if err := json.Unmarshal([]byte(c.must("net", "events", "--json", "web")), &evs); err != nil {
			t.Fatal(err)
		}
	}
	if len(evs) == 0 || evs[0].Proto != "dns" || evs[0].Name != "other.test." || evs[0].Reason != network.ReasonDNS {
		t.Errorf("net events: %+v", evs)
	}
	if out := c.must("net", "events", "web"); !strings.Contains(out, "other.test.") || !strings.Contains(out, network.ReasonDNS) {
		t.Errorf("net events table:\n%s", out)
	}

	// Bad input: one line, status 125, nothing created.
	c.must("create", "--name", "idle", "--net", "egress")
	busy := nettest.Listen(t, w.HostNS, "127.0.0.1:0")
	busyPort := busy.Addr().(*net.TCPAddr).Port
	before := c.must("ls", "-q")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-d", "--net", "egress", "--allow-cidr", "10.0.0.0/40"}, "not a CIDR"},
		{[]string{"run", "-d", "--net", "egress", "--allow-host", "bad..name"}, "not a DNS name"},
		{[]string{"run", "-d", "--net", "egress", "--allow-host", "a.*.com"}, "wildcard"},
		{[]string{"run", "-d", "--net", "sideways"}, "want none, egress or full"},
		{[]string{"run", "-d", "--allow-host", "pypi.org"}, "need --net egress"},
		{[]string{"run", "-d", "--net", "egress", "-p", "70000"}, "out of range"},
		{[]string{"run", "-d", "--net", "egress", "-p", "80/udp"}, "only tcp"},
		{[]string{"run", "-d", "--net", "egress", "-p", fmt.Sprint(busyPort, ":80")}, "in use"},
		{[]string{"net", "update", "idle", "--net", "full"}, "not running"},
		{[]string{"net", "update", "web", "--allow-host", "x.org"}, "--net is required"},
		{[]string{"net", "update", "web", "--net", "egress", "--allow-cidr", "nonsense"}, "not a CIDR"},
	} {
		_, errOut, code := c.run(tc.args...)
		if code != 125 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("smolvm %v: exit %d, stderr %q; want 125 and one line mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
	if after := c.must("ls", "-q"); after != before {
		t.Errorf("bad input changed the sandbox list: %q -> %q", before, after)
	}
	c.must("run", "-d", "--name", "quiet")
	if _, errOut, code := c.run("net", "events", "quiet"); code != 125 || !strings.Contains(errOut, "--net none") {
		t.Errorf("net events of a --net none sandbox: %d %q", code, errOut)
	}

	// Through a server (SMOLVM_HOST), the same.
	direct := c.must("net", "events", "web")
	c.host = serveAPI(t, c)
	t.Cleanup(func() { c.host = "" }) // before the server goes: cleanup removes sandboxes directly
	if remote := c.must("net", "events", "web"); remote != direct {
		t.Errorf("net events through the server:\n%s\ndirect:\n%s", remote, direct)
	}
	c.must("run", "-d", "--name", "remote", "--net", "egress", "--allow-host", "allowed.test")
	if out, _, code := c.run("exec", "remote", "--", "sh", "-c", "curl -sS -m 3 http://allowed.test/"); out != "internet" || code != 0 {
		t.Errorf("a sandbox created through the server reaches its allowed name: %q %d", out, code)
	}
	c.must("net", "update", "remote", "--net", "none")
	if err := json.Unmarshal([]byte(c.must("inspect", "remote")), &views); err != nil || views[0].State.Network.Mode != sandbox.NetNone {
		t.Errorf("inspect through the server after net update: %+v, %v", views, err)
	}
	if _, errOut, code := c.run("net", "update", "quiet", "--net", "full"); code != 125 || !strings.Contains(errOut, "--net none") {
		t.Errorf("net update of a --net none sandbox through the server: %d %q", code, errOut)
	}
}
