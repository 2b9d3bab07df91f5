package manager

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/network"
	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
	"smolvm.dev/smolvm/tests/testenv"
)

// newNetManager is a manager whose sandboxes' "host" is a closed test
// world: nothing they send can leave this machine.
func newNetManager(t testing.TB) (*testManager, *nettest.World) {
	t.Helper()
	testenv.Runsc(t)
	w := nettest.New(t)
	helper := testenv.Smolvm(t)
	m := newManager(t, func(c *Config) { c.Network = w.Host(helper) })
	return m, w
}

// fetch runs curl in sb and returns its output, or "ERR <status>".
func (m *testManager) fetch(t *testing.T, sb *sandbox.Sandbox, args ...string) string {
	t.Helper()
	out, _, exit := m.sh(t, sb, "curl -sS -m 3 "+strings.Join(args, " ")+" 2>/dev/null")
	if exit.Code != 0 {
		return fmt.Sprintf("ERR %d", exit.Code)
	}
	return out
}

func expectFetch(t *testing.T, m *testManager, sb *sandbox.Sandbox, want string, args ...string) {
	t.Helper()
	got := m.fetch(t, sb, args...)
	if ok := got == want || want == "ERR" && strings.HasPrefix(got, "ERR "); !ok {
		t.Errorf("curl %s: got %q, want %q", strings.Join(args, " "), got, want)
	}
}

func TestNetNoneReachesNothing(t *testing.T) {
	m, _ := newNetManager(t)
	sb := m.run(t, sandbox.Config{})
	for _, u := range []string{"http://" + nettest.Internet4, "http://" + nettest.Metadata4, "http://[" + nettest.Internet6 + "]", "http://allowed.test"} {
		expectFetch(t, m, sb, "ERR", u)
	}
	if out, _, _ := m.sh(t, sb, "cat /proc/net/dev"); strings.Contains(out, "eth0") {
		t.Errorf("--net none sandbox has an interface besides loopback:\n%s", out)
	}
}

func TestNetEgress(t *testing.T) {
	m, w := newNetManager(t)
	sb := m.run(t, sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test", "*.allowed.test", "metadata.test", "host.test"}}})

	expectFetch(t, m, sb, "internet", "http://allowed.test/")
	expectFetch(t, m, sb, "internet", "http://www.allowed.test/")
	expectFetch(t, m, sb, "internet", "-6", "http://allowed.test/")
	// Not a disallowed name: its query is refused (curl 6: cannot resolve).
	expectFetch(t, m, sb, "ERR 6", "http://other.test/")
	out, _, _ := m.sh(t, sb, "python3 -c 'import socket\ntry: socket.getaddrinfo(\"other.test\", 80)\nexcept socket.gaierror as e: print(\"refused\", e)'")
	if !strings.HasPrefix(out, "refused") {
		t.Errorf("lookup of a disallowed name: %q", out)
	}
	// Not a disallowed address directly, on either family.
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Other4+"/")
	expectFetch(t, m, sb, "ERR", "http://["+nettest.Other6+"]/")
	// Not the metadata service, directly or by an allowed name resolving
	// there (rebinding).
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Metadata4+"/")
	expectFetch(t, m, sb, "ERR", "http://["+nettest.Metadata6+"]/")
	expectFetch(t, m, sb, "ERR", "http://metadata.test/")
	// Not the host's own services: its uplink address (even by an
	// allowed name), its gateway address, or its loopback.
	st, err := m.NetStatus(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "ERR", fmt.Sprintf("http://%s:%d/", nettest.HostUplink4, nettest.HostUplinkPort))
	expectFetch(t, m, sb, "ERR", fmt.Sprintf("http://host.test:%d/", nettest.HostUplinkPort))
	expectFetch(t, m, sb, "ERR", fmt.Sprintf("http://%s:%d/", st.Addrs.Gateway4, nettest.HostLoopbackPort))
	expectFetch(t, m, sb, "ERR", fmt.Sprintf("http://127.0.0.1:%d/", nettest.HostLoopbackPort))

	// The resolver answers the sandbox only, not the host's other
	// neighbors (here, the host itself).
	q := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	var resp *dns.Msg
	err = network.InNetNS(w.HostNS, func() (err error) {
		resp, _, err = new(dns.Client).Exchange(q, net.JoinHostPort(st.Addrs.Gateway4.String(), "53"))
		return err
	})
	if err != nil || resp.Rcode != dns.RcodeRefused {
		t.Errorf("query from the host to the sandbox's resolver: %v, %v", resp, err)
	}

	// The denials are in the deny log, with reasons.
	want := map[string]bool{network.ReasonDNS: false, network.ReasonNotAllowed: false, network.ReasonMetadata: false, network.ReasonHost: false}
	var evs []sandbox.NetworkEvent
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		evs, err = m.NetEvents(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if _, ok := want[e.Reason]; ok {
				want[e.Reason] = true
			}
		}
		if want[network.ReasonDNS] && want[network.ReasonNotAllowed] && want[network.ReasonMetadata] && want[network.ReasonHost] {
			break
		}
	}
	for r, seen := range want {
		if !seen {
			t.Errorf("deny log has no %q event: %+v", r, evs)
		}
	}
	found := false
	for _, e := range evs {
		found = found || e.Reason == network.ReasonNotAllowed && e.Proto == "tcp" && e.Dst == nettest.Other4+":80"
	}
	if !found {
		t.Errorf("deny log lacks tcp %s:80 (not allowed): %+v", nettest.Other4, evs)
	}
	if st, err = m.NetStatus(context.Background(), sb.ID); err != nil || st.Counters == nil || st.Counters.TxBytes == 0 || st.Counters.RxBytes == 0 {
		t.Errorf("counters: %+v, %v", st, err)
	}
}

func TestNetEgressCIDRAndTTL(t *testing.T) {
	m, w := newNetManager(t)
	w.TTL.Store(1)
	sb := m.run(t, sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, CIDRs: []string{nettest.Other4 + "/32", "169.254.169.254"}}})
	// Allowed CIDRs work by address, even the metadata address when it
	// is named explicitly.
	expectFetch(t, m, sb, "other", "http://"+nettest.Other4+"/")
	expectFetch(t, m, sb, "metadata", "http://"+nettest.Metadata4+"/")
	expectFetch(t, m, sb, "ERR", "http://["+nettest.Other6+"]/")
	// gVisor gives the sandbox no raw sockets (runsc runs without
	// --net-raw), so it cannot forge a source address...
	if out, _, _ := m.sh(t, sb, "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)' 2>&1"); !strings.Contains(out, "Operation not permitted") {
		t.Errorf("raw socket in the sandbox: %q", out)
	}
	// ...and should a backend ever let a frame with a forged source onto
	// the veth, the host drops it, even to an allowed address.
	injectSpoofed(t, m, sb, "10.213.99.99", nettest.Other4)
	if !waitEvent(t, m, sb, func(e sandbox.NetworkEvent) bool {
		return e.Reason == network.ReasonSpoofed && e.Proto == "udp" && e.Dst == nettest.Other4+":9"
	}) {
		t.Error("a forged source was not denied")
	}
	// An address admitted by a DNS answer is admitted for its TTL only.
	expectFetch(t, m, sb, "internet", "http://allowed.test/")
	expectFetch(t, m, sb, "internet", "http://"+nettest.Internet4+"/")
	time.Sleep(3 * time.Second)
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Internet4+"/")
}

// injectSpoofed sends a UDP packet from src to dst, port 9, onto the
// sandbox's veth from inside its namespace, as a compromised backend could.
func injectSpoofed(t *testing.T, m *testManager, sb *sandbox.Sandbox, src, dst string) {
	t.Helper()
	st, err := m.NetStatus(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var gwMAC net.HardwareAddr
	err = network.InNetNS(m.net.NetNS, func() error {
		ifc, err := net.InterfaceByName(st.Addrs.HostVeth)
		if err == nil {
			gwMAC = ifc.HardwareAddr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ip := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0}
	ip = append(append(ip, net.ParseIP(src).To4()...), net.ParseIP(dst).To4()...)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	sum = (sum >> 16) + (sum & 0xffff)
	sum = ^(sum + (sum >> 16)) & 0xffff
	ip[10], ip[11] = byte(sum>>8), byte(sum)
	udp := []byte{4, 210, 0, 9, 0, 8, 0, 0}
	err = network.InNetNS(st.NetNS, func() error {
		eth, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		frame := append(append(append(append([]byte{}, gwMAC...), eth.HardwareAddr...), 0x08, 0x00), append(ip, udp...)...)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: eth.Index, Protocol: 0x0008})
	})
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
}

// waitEvent waits up to 5s for a deny-log event that match accepts.
func waitEvent(t *testing.T, m *testManager, sb *sandbox.Sandbox, match func(sandbox.NetworkEvent) bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		evs, err := m.NetEvents(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs, match) {
			return true
		}
	}
	return false
}

func TestNetFull(t *testing.T) {
	m, _ := newNetManager(t)
	sb := m.run(t, sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetFull}})
	expectFetch(t, m, sb, "other", "http://other.test/")
	expectFetch(t, m, sb, "other", "http://"+nettest.Other4+"/")
	expectFetch(t, m, sb, "other", "http://["+nettest.Other6+"]/")
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Metadata4+"/")
	expectFetch(t, m, sb, "ERR", "http://["+nettest.Metadata6+"]/")
	expectFetch(t, m, sb, "ERR", fmt.Sprintf("http://%s:%d/", nettest.HostUplink4, nettest.HostUplinkPort))
}

func TestNetUpdateLive(t *testing.T) {
	m, _ := newNetManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}}})
	expectFetch(t, m, sb, "internet", "http://allowed.test/")
	expectFetch(t, m, sb, "ERR", "http://other.test/")
	if _, err := m.NetUpdate(ctx, sb.ID, sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"other.test"}}); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "other", "http://other.test/")
	expectFetch(t, m, sb, "ERR", "http://allowed.test/")
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Internet4+"/")
	got, err := m.Get(ctx, sb.ID)
	if err != nil || got.Config.Network.Hosts[0] != "other.test" {
		t.Fatalf("record after update: %+v, %v", got, err)
	}
	if _, err := m.NetUpdate(ctx, sb.ID, sandbox.Network{Mode: sandbox.NetNone}); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "ERR", "http://other.test/")
	if _, err := m.NetUpdate(ctx, sb.ID, sandbox.Network{Mode: sandbox.NetFull}); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "other", "http://"+nettest.Other4+"/")
	if _, err := m.Stop(ctx, sb.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NetUpdate(ctx, sb.ID, sandbox.Network{Mode: sandbox.NetFull}); err == nil {
		t.Error("net update of a stopped sandbox succeeded")
	}
	// A restart boots on the same network (runsc took its addresses).
	if _, err := m.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "other", "http://"+nettest.Other4+"/")
	// After a host reboot nothing of the network is left but the record:
	// a start rebuilds it with the sandbox's current policy.
	if _, err := m.Stop(ctx, sb.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.net.Teardown(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "other", "http://"+nettest.Other4+"/")
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Metadata4+"/")
}

// TestNetUpdateKeepsOpenConnections: a policy update applies to new
// connections; one opened before it carries on.
func TestNetUpdateKeepsOpenConnections(t *testing.T) {
	m, _ := newNetManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{Network: egressToSink()})
	script := fmt.Sprintf(`python3 -c "
import os, socket, time
s = socket.create_connection(('%s', %d))
s.sendall(b'a')
open('/tmp/connected', 'w').close()
while not os.path.exists('/tmp/go'): time.sleep(0.05)
s.sendall(b'b')
s.shutdown(socket.SHUT_WR)
print(s.recv(16).decode())"`, nettest.Internet4, nettest.SinkPort)
	done := make(chan string, 1)
	go func() {
		var out strings.Builder
		m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"sh", "-c", script}}, sandbox.Stdio{Stdout: &out, Stderr: &out})
		done <- out.String()
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, exit := m.sh(t, sb, "test -f /tmp/connected"); exit.Code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection did not open")
		}
	}
	if _, err := m.NetUpdate(ctx, sb.ID, sandbox.Network{Mode: sandbox.NetNone}); err != nil {
		t.Fatal(err)
	}
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Internet4+"/")
	m.sh(t, sb, "touch /tmp/go")
	select {
	case out := <-done:
		if out != "2\n" {
			t.Errorf("the open connection after the update: %q, want the sink's count 2", out)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the open connection hung after the update")
	}
}

// TestNetHelperDeathFailsClosed: the rules are in the kernel, so with its
// helper killed a sandbox gets no DNS answers and nothing new opens up.
func TestNetHelperDeathFailsClosed(t *testing.T) {
	m, _ := newNetManager(t)
	ctx := context.Background()
	sb := m.run(t, sandbox.Config{Network: &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}}})
	expectFetch(t, m, sb, "internet", "http://allowed.test/")
	st, err := m.NetStatus(ctx, sb.ID)
	if err != nil || st.Helper == 0 {
		t.Fatalf("helper: %+v, %v", st, err)
	}
	if err := unix.Kill(st.Helper, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	expectFetch(t, m, sb, "ERR", "http://other.test/")
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Other4+"/")
	expectFetch(t, m, sb, "ERR", "http://"+nettest.Metadata4+"/")
	if out, _, _ := m.sh(t, sb, "getent hosts allowed.test || echo unresolved"); out != "unresolved\n" {
		t.Errorf("DNS without a helper: %q", out)
	}
	if err := m.Remove(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if left := m.net.Leftovers(ctx, sb.ID); len(left) > 0 {
		t.Errorf("left after rm with a dead helper: %v", left)
	}
}

func TestNetPublish(t *testing.T) {
	m, w := newNetManager(t)
	ctx := context.Background()
	// One port on the host's loopback (the default), one on its uplink
	// address, which must be asked for.
	pol := &sandbox.Network{Mode: sandbox.NetEgress, Ports: []sandbox.Port{{Port: 8000}, {HostIP: nettest.HostUplink4, Port: 8000}}}
	server := []string{"sh", "-c", "echo $HOSTNAME > /tmp/id && exec python3 -m http.server -d /tmp 8000"}
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: pol, Cmd: server}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.NetStatus(ctx, sb.ID)
	if err != nil || len(st.Ports) != 2 || st.Ports[0].HostPort == 0 || st.Ports[0].HostIP != "127.0.0.1" || st.Ports[1].HostIP != nettest.HostUplink4 {
		t.Fatalf("ports: %+v, %v", st, err)
	}
	if body := httpGet(t, w, st.Ports[0].HostPort, "/id"); !strings.Contains(body, "200 OK") {
		t.Fatalf("published port: %q", body)
	}
	// From the internet: the uplink port answers, the loopback one is not
	// there at all.
	if body := httpGetAt(t, w.InternetNS, fmt.Sprintf("%s:%d", nettest.HostUplink4, st.Ports[1].HostPort), "/id"); !strings.Contains(body, "200 OK") {
		t.Errorf("port published on the uplink, from the internet: %q", body)
	}
	if c, err := nettest.Dial(ctx, w.InternetNS, fmt.Sprintf("%s:%d", nettest.HostUplink4, st.Ports[0].HostPort)); err == nil {
		c.Close()
		t.Error("a loopback-published port is reachable from the internet")
	}
	// A pinned port in use is a clear error at create, and leaves nothing.
	pinned := &sandbox.Network{Mode: sandbox.NetEgress, Ports: []sandbox.Port{{HostPort: st.Ports[0].HostPort, Port: 80}}}
	if _, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: pinned}}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second sandbox on a used host port: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.dir, "net")); len(ents) != 1 {
		t.Errorf("a failed create left a network: %v", ents)
	}
	// A second sandbox with the same unpinned request gets its own port.
	sb2, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: pol, Cmd: server}})
	if err != nil {
		t.Fatal(err)
	}
	st2, err := m.NetStatus(ctx, sb2.ID)
	if err != nil || st2.Ports[0].HostPort == st.Ports[0].HostPort {
		t.Fatalf("second sandbox's ports: %+v, %v", st2, err)
	}
	if a, b := httpGet(t, w, st.Ports[0].HostPort, "/id"), httpGet(t, w, st2.Ports[0].HostPort, "/id"); !strings.Contains(a, sb.Config.Hostname) || !strings.Contains(b, sb2.Config.Hostname) {
		t.Errorf("each port reaches its own sandbox: %q, %q", a, b)
	}
}

func TestNetTeardown(t *testing.T) {
	m, w := newNetManager(t)
	ctx := context.Background()
	pol := &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, Ports: []sandbox.Port{{Port: 80}}}
	sb := m.run(t, sandbox.Config{Network: pol})
	if left := m.net.Leftovers(ctx, sb.ID); len(left) < 5 {
		t.Fatalf("a running sandbox's network has only %v", left)
	}
	if err := m.Remove(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if left := m.net.Leftovers(ctx, sb.ID); len(left) > 0 {
		t.Errorf("left after rm: %v", left)
	}

	// Kill real CLIs at points through create, then gc.
	env := []string{"SMOLVM_NET_NETNS=" + w.HostNS, "SMOLVM_NET_RESOLVER=" + w.Resolver}
	for i, delay := range []time.Duration{30, 80, 150, 250, 400, 700} {
		m.killAfter(t, delay*time.Millisecond, env, "run", "-d", "--name", fmt.Sprintf("crash%d", i),
			"--net", "egress", "--allow-host", "allowed.test", "-p", "80")
	}
	sbs := m.afterGC(t)
	for _, sb := range sbs {
		if err := m.Remove(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(m.dir, "net"))
	for _, e := range ents {
		t.Errorf("left after gc and rm: network of %s: %v", e.Name(), m.net.Leftovers(ctx, e.Name()))
	}
	out, _ := exec.Command("ip", "-n", filepath.Base(w.HostNS), "-o", "link").Output()
	if strings.Contains(string(out), "smv") {
		t.Errorf("veths left:\n%s", out)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), m.dir) {
		t.Error("mounts left under the data dir")
	}
}

// TestNetFork forks and restores a networked sandbox: each copy takes its own
// namespace's address (gVisor's netstack takes the interfaces it finds at
// restore), keeps the policy, and gets its own host port.
func TestNetFork(t *testing.T) {
	m, w := newNetManager(t)
	ctx := context.Background()
	pol := &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, Ports: []sandbox.Port{{Port: 8000}}}
	src := m.run(t, sandbox.Config{Network: pol, Cmd: []string{"sh", "-c", "echo source > /tmp/id && exec python3 -m http.server -d /tmp 8000"}})
	srcSt, err := m.NetStatus(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := httpGet(t, w, srcSt.Ports[0].HostPort, "/id"); !strings.HasSuffix(got, "source\n") {
		t.Fatalf("source's server: %q", got)
	}
	forks, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A restore from a snapshot is a copy too.
	snap, err := m.Checkpoint(ctx, src.ID, sandbox.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := m.Restore(ctx, snap.ID, sandbox.RestoreOptions{Name: "restored"})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Config.Network == nil || restored.Config.Network.Hosts[0] != "allowed.test" {
		t.Fatalf("restored policy: %+v", restored.Config.Network)
	}
	forks = append(forks, restored)
	myAddr := `python3 -c "import socket; s=socket.socket(2,2); s.connect(('` + nettest.Internet4 + `',53)); print(s.getsockname()[0])"`
	ports := map[int]string{srcSt.Ports[0].HostPort: "source"}
	for i, f := range forks {
		st, err := m.NetStatus(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out, _, _ := m.sh(t, f, myAddr); strings.TrimSpace(out) != st.Addrs.Sandbox4.String() {
			t.Errorf("fork %d's address %q, want its own %s", i, out, st.Addrs.Sandbox4)
		}
		expectFetch(t, m, f, "internet", "http://allowed.test/")
		expectFetch(t, m, f, "ERR", "http://"+nettest.Other4+"/")
		if _, ok := ports[st.Ports[0].HostPort]; ok {
			t.Errorf("fork %d shares host port %d", i, st.Ports[0].HostPort)
		}
		// The server the source ran is in each fork too, behind its own port.
		m.sh(t, f, "echo "+f.Name+" > /tmp/id")
		ports[st.Ports[0].HostPort] = f.Name
	}
	if out, _, _ := m.sh(t, src, myAddr); strings.TrimSpace(out) != srcSt.Addrs.Sandbox4.String() {
		t.Errorf("source's address after fork %q, want %s", out, srcSt.Addrs.Sandbox4)
	}
	for port, want := range ports {
		if got := httpGet(t, w, port, "/id"); !strings.HasSuffix(got, "\r\n\r\n"+want+"\n") {
			t.Errorf("host port %d: %q, want %s", port, got, want)
		}
	}
	for _, f := range forks {
		if err := m.Remove(ctx, f.ID, true); err != nil {
			t.Fatal(err)
		}
		if left := m.net.Leftovers(ctx, f.ID); len(left) > 0 {
			t.Errorf("left after rm of fork: %v", left)
		}
	}
}

// httpGet fetches path from a published port on the world host's loopback,
// waiting up to 10s for the server behind it.
func httpGet(t *testing.T, w *nettest.World, port int, path string) string {
	t.Helper()
	return httpGetAt(t, w.HostNS, fmt.Sprintf("127.0.0.1:%d", port), path)
}

// httpGetAt fetches path from addr, connecting from namespace ns.
func httpGetAt(t *testing.T, ns, addr, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := nettest.Dial(context.Background(), ns, addr)
		if err == nil {
			fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path)
			b, _ := io.ReadAll(c)
			c.Close()
			if len(b) > 0 || time.Now().After(deadline) {
				return string(b)
			}
		} else if time.Now().After(deadline) {
			return err.Error()
		}
	}
}

// TestNetTwoDataDirs runs networked sandboxes of two data dirs in one host
// namespace at once: slots (addresses, NFLOG groups) are taken host-wide,
// so each gets its own, reaches what its policy allows, and logs its own
// denials.
func TestNetTwoDataDirs(t *testing.T) {
	m1, w := newNetManager(t)
	m2 := newManager(t, func(c *Config) { c.Network = w.Host(testenv.Smolvm(t)) })
	ctx := context.Background()
	pol := &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}}
	sb1 := m1.run(t, sandbox.Config{Network: pol})
	sb2 := m2.run(t, sandbox.Config{Network: pol})
	st1, err := m1.NetStatus(ctx, sb1.ID)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := m2.NetStatus(ctx, sb2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Addrs.Slot == st2.Addrs.Slot || st1.Addrs.LogGroup == st2.Addrs.LogGroup {
		t.Errorf("two data dirs share slot %d / group %d", st1.Addrs.Slot, st1.Addrs.LogGroup)
	}
	for _, c := range []struct {
		m  *testManager
		sb *sandbox.Sandbox
	}{{m1, sb1}, {m2, sb2}} {
		expectFetch(t, c.m, c.sb, "internet", "http://allowed.test/")
		expectFetch(t, c.m, c.sb, "ERR", "http://"+nettest.Other4+"/")
		var evs []sandbox.NetworkEvent
		for deadline := time.Now().Add(5 * time.Second); len(evs) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if evs, err = c.m.NetEvents(ctx, c.sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		if len(evs) == 0 {
			t.Errorf("%s: no denial logged", c.sb.ID)
		}
	}
	// A slot freed in one data dir is taken again by the other.
	if err := m1.Remove(ctx, sb1.ID, true); err != nil {
		t.Fatal(err)
	}
	sb3 := m2.run(t, sandbox.Config{Network: pol})
	st3, err := m2.NetStatus(ctx, sb3.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st3.Addrs.Slot != st1.Addrs.Slot {
		t.Errorf("slot after the first data dir freed %d: %d", st1.Addrs.Slot, st3.Addrs.Slot)
	}
	expectFetch(t, m2, sb3, "internet", "http://allowed.test/")
}
