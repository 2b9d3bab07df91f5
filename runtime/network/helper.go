package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"smolvm.dev/smolvm/sandbox"
)

// The helper is a process per sandbox network, started by Setup in the
// host namespace and killed by Teardown. smolvm has no daemon, so what
// must live as long as the sandbox lives here: the DNS resolver on the
// gateway, the published ports' forwarders and the deny log's reader.
// Everything that enforces policy is in the kernel (nftables), so a dead
// helper fails closed: no DNS answers, no new admissions.

// DNS admissions last the answer's TTL, within these bounds: a TTL of 0
// must still let the client connect right after the answer.
const (
	minAdmit = 2 * time.Second
	maxAdmit = 24 * time.Hour
)

type helper struct {
	dir    string
	fw     *firewall
	events *eventLog
	client *dns.Client

	mu     sync.Mutex
	cfg    helperConfig
	cfgKey string // size, mtime and inode of the config file read
}

// RunHelper runs sandbox network dir's helper until ctx ends. It writes
// "ok" or the error that stopped it to ready once it serves.
func RunHelper(ctx context.Context, dir string, ready io.Writer) error {
	h := &helper{dir: dir, events: &eventLog{path: filepath.Join(dir, fileEvents)}, client: &dns.Client{Timeout: 5 * time.Second}}
	// The helper records its own pid: a CLI killed right after starting
	// it must not leave a helper that teardown cannot find.
	if err := os.WriteFile(filepath.Join(dir, filePid), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		fmt.Fprintf(ready, "%v\n", err)
		return err
	}
	err := h.start(ctx)
	if err != nil {
		fmt.Fprintf(ready, "%v\n", err)
		return err
	}
	fmt.Fprintln(ready, "ok")
	// Teardown kills the helper; should that ever miss, it still ends
	// once its directory is gone.
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
			if _, err := os.Stat(filepath.Join(dir, fileConfig)); err != nil {
				return nil
			}
		}
	}
}

func (h *helper) start(ctx context.Context) error {
	if _, err := h.config(); err != nil {
		return err
	}
	a := h.cfg.Addrs
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return err
	}
	h.fw = newFirewall(conn, h.cfg.ID, a)
	// Denials are read from an NFLOG group: nf_log to the kernel log is
	// silent outside the init namespace (nf_log_all_netns=0).
	nl, err := dialNflog(a.LogGroup)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		nl.close()
	}()
	go h.readDenials(nl)
	for _, gw := range []netip.Addr{a.Gateway4, a.Gateway6} {
		addr := netip.AddrPortFrom(gw, 53).String()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
			go srv.ActivateAndServe()
			go func() {
				<-ctx.Done()
				srv.Shutdown()
			}()
		}
	}
	return h.publish(ctx)
}

// config returns the current config, rereading the file when it changed
// (smolvm net update replaces it).
func (h *helper) config() (helperConfig, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := filepath.Join(h.dir, fileConfig)
	fi, err := os.Stat(p)
	if err != nil {
		return h.cfg, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	key := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano(), st.Ino)
	if key == h.cfgKey {
		return h.cfg, nil
	}
	var cfg helperConfig
	if err := readJSON(p, &cfg); err != nil {
		return h.cfg, err
	}
	h.cfg, h.cfgKey = cfg, key
	return cfg, nil
}

func (h *helper) readDenials(nl *nflog) {
	for {
		evs, err := nl.read()
		if err != nil {
			return
		}
		for _, e := range evs {
			if err := h.events.add(e); err != nil {
				log.Printf("deny log: %v", err)
			}
		}
	}
}

// ServeDNS answers the sandbox's queries: refused for names the policy
// does not allow; otherwise the upstream's answer, whose addresses the
// firewall admits before the sandbox sees them.
func (h *helper) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	cfg, err := h.config()
	if err != nil {
		log.Printf("dns: config: %v", err)
	}
	reply := func(code int) {
		m := new(dns.Msg)
		m.SetRcode(req, code)
		w.WriteMsg(m)
	}
	// Only the sandbox gets answers: the gateway address is the host's,
	// and a neighbor routing to it must not use the sandbox's allow list.
	if from, ok := netip.AddrFromSlice(remoteIP(w.RemoteAddr())); !ok || (from.Unmap() != cfg.Addrs.Sandbox4 && from != cfg.Addrs.Sandbox6) {
		reply(dns.RcodeRefused)
		return
	}
	if len(req.Question) != 1 {
		reply(dns.RcodeFormatError)
		return
	}
	q := req.Question[0]
	if !cfg.Network.AllowsName(q.Name) {
		h.events.add(sandbox.NetworkEvent{Time: time.Now().UTC(), Proto: "dns", Name: q.Name, Dst: dns.TypeToString[q.Qtype], Reason: ReasonDNS})
		reply(dns.RcodeRefused)
		return
	}
	c := *h.client
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		c.Net = "tcp"
	}
	resp, _, err := c.Exchange(req, cfg.Resolver)
	if err != nil {
		log.Printf("dns: %s: upstream %s: %v", q.Name, cfg.Resolver, err)
		reply(dns.RcodeServerFailure)
		return
	}
	if cfg.Network.Mode == sandbox.NetEgress {
		if err := h.admit(resp); err != nil {
			log.Printf("dns: admit %s: %v", q.Name, err)
			reply(dns.RcodeServerFailure)
			return
		}
	}
	w.WriteMsg(resp)
}

func remoteIP(a net.Addr) net.IP {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.IP
	case *net.TCPAddr:
		return a.IP
	}
	return nil
}

// admit lets the sandbox connect to the answer's addresses for their TTL.
// Rebinding gains nothing: an allowed name that resolves to a denied range
// (metadata, private) still meets the deny rules, which come first.
func (h *helper) admit(resp *dns.Msg) error {
	byTTL := map[time.Duration][]netip.Addr{}
	for _, rr := range resp.Answer {
		var ip net.IP
		switch r := rr.(type) {
		case *dns.A:
			ip = r.A
		case *dns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		ttl := min(max(time.Duration(rr.Header().Ttl)*time.Second, minAdmit), maxAdmit)
		byTTL[ttl] = append(byTTL[ttl], a.Unmap())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ttl, addrs := range byTTL {
		if err := h.fw.admit(addrs, ttl); err != nil {
			return err
		}
	}
	return nil
}

// publish binds the published ports and forwards each connection to the
// sandbox. Binding here, before the helper reports ready, is what makes
// a port in use an error of create.
func (h *helper) publish(ctx context.Context) error {
	var maps []sandbox.PortMapping
	for _, p := range h.cfg.Network.Ports {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(p.HostAddr(), uint16(p.HostPort)).String())
		if err != nil {
			var se *os.SyscallError
			if errors.As(err, &se) && errors.Is(se.Err, syscall.EADDRINUSE) {
				return fmt.Errorf("publish %s:%d: host port in use", p.HostAddr(), p.HostPort)
			}
			return fmt.Errorf("publish: %w", err)
		}
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		bound := ln.Addr().(*net.TCPAddr)
		maps = append(maps, sandbox.PortMapping{HostIP: p.HostAddr().String(), HostPort: bound.Port, Port: p.Port})
		to := net.JoinHostPort(h.cfg.Addrs.Sandbox4.String(), strconv.Itoa(p.Port))
		go forward(ln, to)
	}
	return writeFileAtomic(filepath.Join(h.dir, filePorts), maps)
}

func forward(ln net.Listener, to string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			s, err := net.DialTimeout("tcp", to, 10*time.Second)
			if err != nil {
				return
			}
			defer s.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(s, c)
			go pipe(c, s)
			<-done
			<-done
		}()
	}
}
