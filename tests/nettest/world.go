// Package nettest builds a closed network world for tests: a "host"
// namespace with no route off the machine, joined by veths to a fake
// internet and a fake cloud metadata service, each with real servers.
package nettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"smolvm.dev/smolvm/runtime/network"
)

// Addresses of the world. The internet's are documentation ranges, which
// no policy treats as private, so egress rules see them as public.
const (
	HostUplink4 = "203.0.113.1"   // the host's own address on the internet side
	Internet4   = "203.0.113.10"  // allowed.test; also the DNS server
	Other4      = "203.0.113.20"  // other.test: a server no policy allows by name
	HostUplink6 = "2001:db8:1::1" //
	Internet6   = "2001:db8:1::10"
	Other6      = "2001:db8:1::20"
	Metadata4   = "169.254.169.254"
	Metadata6   = "fd00:ec2::254"
	// HostLoopbackPort and HostUplinkPort serve in the host namespace, on
	// 127.0.0.1 and HostUplink4: the host's own services.
	HostLoopbackPort = 8080
	HostUplinkPort   = 8081
	// SinkPort, on Internet4, reads a connection to its end and answers
	// with the byte count: a target for throughput and connect benchmarks.
	SinkPort = 9000
)

// World is one test's closed network.
type World struct {
	// HostNS is the namespace that plays the host: sandboxes' veths and
	// firewalls live there.
	HostNS string
	// InternetNS is the fake internet's namespace, for tests that connect
	// to the host from outside.
	InternetNS string
	// Resolver is the fake internet's DNS server.
	Resolver string
	// TTL is the TTL of every DNS answer, in seconds (default 60).
	TTL atomic.Uint32

	t     testing.TB
	names []string
}

// New builds a world; its namespaces go away when the test ends.
func New(t testing.TB) *World {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	tag := "smt" + hex.EncodeToString(b[:])
	w := &World{t: t, Resolver: Internet4 + ":53"}
	w.TTL.Store(60)
	host, inet, meta := tag+"h", tag+"i", tag+"m"
	w.HostNS, w.InternetNS = "/run/netns/"+host, "/run/netns/"+inet
	t.Cleanup(w.close)
	for _, ns := range []string{host, inet, meta} {
		w.ip("netns", "add", ns)
		w.names = append(w.names, ns)
		w.ip("-n", ns, "link", "set", "lo", "up")
	}
	w.link(host, tag+"a", inet, "eth0")
	w.link(host, tag+"b", meta, "eth0")
	w.addr(host, tag+"a", HostUplink4+"/24", HostUplink6+"/64")
	w.addr(inet, "eth0", Internet4+"/24", Other4+"/24", Internet6+"/64", Other6+"/64")
	w.addr(host, tag+"b", "169.254.169.1/16", "fd00:ec2::1/64")
	w.addr(meta, "eth0", Metadata4+"/16", Metadata6+"/64")
	// Every route out of the host ends in the fake internet.
	w.ip("-n", host, "route", "add", "default", "via", Internet4)
	w.ip("-n", host, "-6", "route", "add", "default", "via", Internet6)
	w.ip("-n", meta, "route", "add", "default", "via", "169.254.169.1")
	w.ip("-n", meta, "-6", "route", "add", "default", "via", "fd00:ec2::1")
	w.ip("-n", inet, "route", "add", "default", "via", HostUplink4)
	w.ip("-n", inet, "-6", "route", "add", "default", "via", HostUplink6)

	w.serveHTTP(w.ns(inet), Internet4+":80", "internet")
	w.serveHTTP(w.ns(inet), "["+Internet6+"]:80", "internet")
	w.serveHTTP(w.ns(inet), Other4+":80", "other")
	w.serveHTTP(w.ns(inet), "["+Other6+"]:80", "other")
	w.serveHTTP(w.ns(meta), Metadata4+":80", "metadata")
	w.serveHTTP(w.ns(meta), "["+Metadata6+"]:80", "metadata")
	w.serveHTTP(w.HostNS, fmt.Sprintf("127.0.0.1:%d", HostLoopbackPort), "host-loopback")
	w.serveHTTP(w.HostNS, fmt.Sprintf("%s:%d", HostUplink4, HostUplinkPort), "host-uplink")
	w.serveDNS(w.ns(inet))
	w.serveSink(w.ns(inet))
	return w
}

func (w *World) serveSink(ns string) {
	ln := Listen(w.t, ns, fmt.Sprintf("%s:%d", Internet4, SinkPort))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprint(c, n)
			}()
		}
	}()
}

func (w *World) ns(name string) string { return "/run/netns/" + name }

func (w *World) ip(args ...string) {
	w.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		w.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (w *World) link(ns1, if1, ns2, if2 string) {
	w.t.Helper()
	w.ip("-n", ns1, "link", "add", if1, "type", "veth", "peer", "name", if2, "netns", ns2)
	w.ip("-n", ns1, "link", "set", if1, "up")
	w.ip("-n", ns2, "link", "set", if2, "up")
}

func (w *World) addr(ns, dev string, addrs ...string) {
	w.t.Helper()
	for _, a := range addrs {
		args := []string{"-n", ns, "addr", "add", a, "dev", dev}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		w.ip(args...)
	}
}

func (w *World) close() {
	for _, n := range w.names {
		exec.Command("ip", "netns", "del", n).Run()
	}
}

// Host is a sandbox network host that lives in this world, for
// manager.Config (which gives it its directory and store); helper is a
// smolvm binary (testenv.Smolvm) to run the helpers.
func (w *World) Host(helper string) *network.Host {
	return &network.Host{NetNS: w.HostNS, Resolver: w.Resolver, Helper: []string{helper, "net-helper"}}
}

// Listen opens a TCP listener in namespace ns.
func Listen(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := network.InNetNS(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Dial connects to addr from namespace ns.
func Dial(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := network.InNetNS(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

func (w *World) serveHTTP(ns, addr, body string) {
	ln := Listen(w.t, ns, addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // an upload arrives whole (egress tests count it)
		fmt.Fprint(rw, body)
	})}
	go srv.Serve(ln)
	w.t.Cleanup(func() { srv.Close() })
}

// Names the fake DNS server answers.
var names = map[string][2]string{
	"allowed.test.":        {Internet4, Internet6},
	"www.allowed.test.":    {Internet4, Internet6},
	"other.test.":          {Other4, Other6},
	"metadata.test.":       {Metadata4, Metadata6}, // a rebinding attempt
	"host.test.":           {HostUplink4, HostUplink6},
	"deep.a.allowed.test.": {Internet4, Internet6},
}

func (w *World) serveDNS(ns string) {
	var pc net.PacketConn
	err := network.InNetNS(ns, func() (err error) {
		pc, err = net.ListenPacket("udp", w.Resolver)
		return err
	})
	if err != nil {
		w.t.Fatalf("dns: %v", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(rw dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		a, ok := names[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Rrtype: q.Qtype, Ttl: w.TTL.Load()}
		switch {
		case ok && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.ParseIP(a[0])})
		case ok && q.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP(a[1])})
		}
		rw.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	w.t.Cleanup(func() { srv.Shutdown() })
}
