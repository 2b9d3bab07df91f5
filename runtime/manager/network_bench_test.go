package manager

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
	"smolvm.dev/smolvm/tests/nettest"
)

// The network benchmarks run in a closed test world (tests/nettest):
// each pairs the sandbox with the same work done from the host namespace,
// or a policy with --net none, in the same run.

const benchBytes = 64 << 20

var sinkAddr = fmt.Sprintf("%s:%d", nettest.Internet4, nettest.SinkPort)

// egressToSink is a policy that allows the sink by address.
func egressToSink() *sandbox.Network {
	return &sandbox.Network{Mode: sandbox.NetEgress, CIDRs: []string{nettest.Internet4}}
}

// BenchmarkNetThroughput sends 64 MiB to a server in the test world from
// a sandbox (through its veth, the firewall and NAT) and from the host
// namespace directly, and reports both rates and their ratio.
func BenchmarkNetThroughput(b *testing.B) {
	m, w := newNetManager(b)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: egressToSink()}})
	if err != nil {
		b.Fatal(err)
	}
	// Timed inside the sandbox, so process start does not count.
	script := fmt.Sprintf(`python3 -c "
import socket, time
buf = bytes(1 << 20)
s = socket.create_connection(('%s', %d))
t = time.perf_counter()
for _ in range(%d): s.sendall(buf)
s.shutdown(socket.SHUT_WR)
n = s.recv(64)
print(time.perf_counter() - t, n.decode())"`, nettest.Internet4, nettest.SinkPort, benchBytes>>20)
	var inSB, onHost time.Duration
	for b.Loop() {
		out, _, exit := m.sh(b, sb, script)
		f := strings.Fields(out)
		if exit.Code != 0 || len(f) != 2 || f[1] != strconv.Itoa(benchBytes) {
			b.Fatalf("sandbox transfer: %q %+v", out, exit)
		}
		secs, _ := strconv.ParseFloat(f[0], 64)
		inSB += time.Duration(secs * float64(time.Second))
		onHost += hostTransfer(b, w)
	}
	n := float64(b.N) * benchBytes / (1 << 20)
	b.ReportMetric(n/inSB.Seconds(), "sandbox-MiB/s")
	b.ReportMetric(n/onHost.Seconds(), "host-MiB/s")
	b.ReportMetric(onHost.Seconds()/inSB.Seconds(), "sandbox/host")
}

func hostTransfer(b *testing.B, w *nettest.World) time.Duration {
	c, err := nettest.Dial(context.Background(), w.HostNS, sinkAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	t := time.Now()
	for range benchBytes >> 20 {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	if _, err := io.ReadAll(c); err != nil {
		b.Fatal(err)
	}
	return time.Since(t)
}

// BenchmarkNetConnect measures TCP connection setup from a sandbox to the
// test world's server (first SYN through the firewall to the accepted
// connection), and the same from the host namespace.
func BenchmarkNetConnect(b *testing.B) {
	m, w := newNetManager(b)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: egressToSink()}})
	if err != nil {
		b.Fatal(err)
	}
	const per = 50
	script := fmt.Sprintf(`python3 -c "
import socket, time
for _ in range(%d):
    t = time.perf_counter()
    s = socket.create_connection(('%s', %d))
    print(int((time.perf_counter() - t) * 1e9))
    s.close()"`, per, nettest.Internet4, nettest.SinkPort)
	var inSB, onHost []time.Duration
	for b.Loop() {
		out, _, exit := m.sh(b, sb, script)
		if exit.Code != 0 {
			b.Fatalf("sandbox connects: %q %+v", out, exit)
		}
		for _, f := range strings.Fields(out) {
			ns, _ := strconv.ParseInt(f, 10, 64)
			inSB = append(inSB, time.Duration(ns))
		}
		for range per {
			t := time.Now()
			c, err := nettest.Dial(ctx, w.HostNS, sinkAddr)
			if err != nil {
				b.Fatal(err)
			}
			onHost = append(onHost, time.Since(t))
			c.Close()
		}
	}
	reportQuantiles(b, inSB)
	hp50, hp99 := quantiles(onHost)
	b.ReportMetric(hp50, "host-p50-ms")
	b.ReportMetric(hp99, "host-p99-ms")
}

// noneAndEgress compares a sandbox without a network with one with a
// typical policy (an allowed name and a published port). Each iteration
// times op once for each, alternating, so machine noise hits both alike;
// it reports each one's p50/p99 and the difference of the medians.
func noneAndEgress(b *testing.B, op func(*sandbox.Network) time.Duration) {
	egress := &sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, Ports: []sandbox.Port{{Port: 80}}}
	var none, pol []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			none = append(none, op(nil))
			pol = append(pol, op(egress))
		} else {
			pol = append(pol, op(egress))
			none = append(none, op(nil))
		}
	}
	n50, n99 := quantiles(none)
	e50, e99 := quantiles(pol)
	b.ReportMetric(n50, "none-p50-ms")
	b.ReportMetric(n99, "none-p99-ms")
	b.ReportMetric(e50, "egress-p50-ms")
	b.ReportMetric(e99, "egress-p99-ms")
	b.ReportMetric(e50-n50, "policy-cost-p50-ms")
}

// BenchmarkNetCreate measures create-to-running with a policy and with
// --net none: the difference is what a network costs.
func BenchmarkNetCreate(b *testing.B) {
	m, _ := newNetManager(b)
	ctx := context.Background()
	noneAndEgress(b, func(pol *sandbox.Network) time.Duration {
		t := time.Now()
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: pol}})
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t)
		b.StopTimer()
		m.Remove(ctx, sb.ID, true)
		b.StartTimer()
		return d
	})
}

// BenchmarkNetFork measures a one-copy fork of a running sandbox with a
// policy and with --net none.
func BenchmarkNetFork(b *testing.B) {
	m, _ := newNetManager(b)
	ctx := context.Background()
	srcs := map[bool]*sandbox.Sandbox{}
	for _, pol := range []*sandbox.Network{nil, {Mode: sandbox.NetEgress, Hosts: []string{"allowed.test"}, Ports: []sandbox.Port{{Port: 80}}}} {
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: sandbox.Config{Network: pol}})
		if err != nil {
			b.Fatal(err)
		}
		srcs[pol != nil] = sb
	}
	noneAndEgress(b, func(pol *sandbox.Network) time.Duration {
		t := time.Now()
		forks, err := m.Fork(ctx, srcs[pol != nil].ID, sandbox.ForkOptions{N: 1})
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t)
		b.StopTimer()
		m.Remove(ctx, forks[0].ID, true)
		b.StartTimer()
		return d
	})
}
