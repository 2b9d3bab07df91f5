package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// NetworkMode is how much of the network a sandbox may reach.
type NetworkMode string

const (
	// NetNone gives the sandbox only its own loopback (the default).
	NetNone NetworkMode = "none"
	// NetEgress allows outbound connections to allowed names and CIDRs.
	NetEgress NetworkMode = "egress"
	// NetFull allows outbound connections anywhere except the addresses
	// every mode denies (metadata, the host, link-local).
	NetFull NetworkMode = "full"
)

// ErrInvalidNetwork marks bad user input.
var ErrInvalidNetwork = errdefs.New(errdefs.ErrInvalid, "invalid network setting")

// Network is what a sandbox may reach. It is part of the sandbox's config,
// so checkpoints and forks carry it.
type Network struct {
	Mode NetworkMode `json:"mode"`
	// Hosts are allowed DNS names: exact ("pypi.org") or one wildcard
	// label ("*.example.com", which matches any name below example.com).
	Hosts []string `json:"allow_hosts,omitempty"`
	// CIDRs are allowed destinations. An allowed CIDR also overrides the
	// addresses denied by default (metadata, private ranges, the host).
	CIDRs []string `json:"allow_cidrs,omitempty"`
	// Ports are published TCP ports.
	Ports []Port `json:"ports,omitempty"`
}

// Port publishes a sandbox's TCP port on the host.
type Port struct {
	// HostIP is the host address to listen on; empty means loopback.
	HostIP string `json:"host_ip,omitempty"`
	// HostPort is the host port; 0 takes a free one at each start, so
	// forks and restores get their own. A non-zero port is pinned.
	HostPort int `json:"host_port,omitempty"`
	Port     int `json:"port"`
}

// Enabled reports whether the sandbox needs a network of its own.
func (p *Network) Enabled() bool { return p != nil && p.Mode != "" && p.Mode != NetNone }

// Validate checks p and normalizes names and CIDRs.
func (p *Network) Validate() error {
	switch p.Mode {
	case "", NetNone:
		if len(p.Hosts)+len(p.CIDRs)+len(p.Ports) > 0 {
			return fmt.Errorf("%w: --allow-host, --allow-cidr and --publish need --net egress or --net full", ErrInvalidNetwork)
		}
		p.Mode = NetNone
		return nil
	case NetEgress:
	case NetFull:
		if len(p.Hosts) > 0 {
			return fmt.Errorf("%w: --allow-host needs --net egress (full already allows every name)", ErrInvalidNetwork)
		}
	default:
		return fmt.Errorf("%w: --net %q: want none, egress or full", ErrInvalidNetwork, p.Mode)
	}
	for i, h := range p.Hosts {
		n, err := normalizeHost(h)
		if err != nil {
			return err
		}
		p.Hosts[i] = n
	}
	for i, c := range p.CIDRs {
		pfx, err := ParseCIDR(c)
		if err != nil {
			return err
		}
		p.CIDRs[i] = pfx.String()
	}
	seen := map[string]bool{}
	for _, pt := range p.Ports {
		if err := pt.validate(); err != nil {
			return err
		}
		k := pt.HostAddr().String() + ":" + strconv.Itoa(pt.HostPort)
		if pt.HostPort != 0 && seen[k] {
			return fmt.Errorf("%w: host port %s published twice", ErrInvalidNetwork, k)
		}
		seen[k] = true
	}
	return nil
}

func normalizeHost(h string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(h, "."))
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: --allow-host %q: %s", ErrInvalidNetwork, h, why)
	}
	rest := strings.TrimPrefix(n, "*.")
	if strings.Contains(rest, "*") {
		return bad("a wildcard is allowed only as the whole first label (*.example.com)")
	}
	if _, err := netip.ParseAddr(rest); err == nil {
		return bad("an address, not a name: use --allow-cidr")
	}
	labels := strings.Split(rest, ".")
	if len(rest) > 253 || len(labels) < 2 && rest != n {
		return bad("a wildcard needs a domain below it")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return bad("not a DNS name")
		}
		for _, c := range l {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return bad("not a DNS name")
			}
		}
	}
	return n, nil
}

// ParseCIDR parses an allowed destination: a CIDR, or one address.
func ParseCIDR(c string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(c)
	if err != nil {
		a, aerr := netip.ParseAddr(c)
		if aerr != nil {
			return netip.Prefix{}, fmt.Errorf("%w: --allow-cidr %q: not a CIDR or address", ErrInvalidNetwork, c)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if a := pfx.Addr(); a.Is4In6() {
		pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), nil
}

// AllowsName reports whether the policy lets the sandbox resolve name.
func (p *Network) AllowsName(name string) bool {
	if p.Mode == NetFull {
		return true
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, h := range p.Hosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
				return true
			}
		} else if name == h {
			return true
		}
	}
	return false
}

// HostAddr is the host address the port listens on.
func (pt Port) HostAddr() netip.Addr {
	if pt.HostIP == "" {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	a, _ := netip.ParseAddr(pt.HostIP)
	return a
}

func (pt Port) validate() error {
	if pt.Port < 1 || pt.Port > 65535 {
		return fmt.Errorf("%w: --publish: sandbox port %d out of range 1-65535", ErrInvalidNetwork, pt.Port)
	}
	if pt.HostPort < 0 || pt.HostPort > 65535 {
		return fmt.Errorf("%w: --publish: host port %d out of range 1-65535", ErrInvalidNetwork, pt.HostPort)
	}
	if pt.HostIP != "" {
		if _, err := netip.ParseAddr(pt.HostIP); err != nil {
			return fmt.Errorf("%w: --publish: host address %q: not an IP address", ErrInvalidNetwork, pt.HostIP)
		}
	}
	return nil
}

// ParsePort parses -p's [HOSTIP:][HOSTPORT:]PORT[/tcp]. Without a host
// port, a free one is taken at each start.
func ParsePort(s string) (Port, error) {
	bad := func(why string) (Port, error) {
		return Port{}, fmt.Errorf("%w: --publish %q: %s", ErrInvalidNetwork, s, why)
	}
	spec, proto, _ := strings.Cut(s, "/")
	if proto != "" && proto != "tcp" {
		return bad("only tcp is supported")
	}
	var host, hostPort, port string
	if i := strings.LastIndexByte(spec, ':'); i < 0 {
		port = spec
	} else {
		port = spec[i+1:]
		rest := spec[:i]
		if j := strings.LastIndexByte(rest, ':'); j < 0 {
			hostPort = rest
		} else {
			host, hostPort = strings.Trim(rest[:j], "[]"), rest[j+1:]
		}
	}
	var pt Port
	var err error
	if pt.Port, err = strconv.Atoi(port); err != nil {
		return bad("sandbox port is not a number")
	}
	if hostPort != "" {
		if pt.HostPort, err = strconv.Atoi(hostPort); err != nil {
			return bad("host port is not a number")
		}
		if pt.HostPort == 0 {
			return bad("host port 0: leave it out for a free port")
		}
	}
	if host != "" && net.ParseIP(host) == nil {
		return bad("host address is not an IP address")
	}
	pt.HostIP = host
	return pt, pt.validate()
}

// NetworkAddrs are a sandbox's addresses on its veth pair.
type NetworkAddrs struct {
	Slot     int        `json:"slot"`
	Gateway4 netip.Addr `json:"gateway4"`
	Sandbox4 netip.Addr `json:"sandbox4"`
	Gateway6 netip.Addr `json:"gateway6"`
	Sandbox6 netip.Addr `json:"sandbox6"`
	HostVeth string     `json:"host_veth"`
	LogGroup uint16     `json:"log_group"`
}

// NetworkEvent is one denied connection attempt or DNS query.
type NetworkEvent struct {
	Time   time.Time `json:"time"`
	Proto  string    `json:"proto"`          // tcp, udp, icmp, dns, ...
	Dst    string    `json:"dst,omitempty"`  // address, or address:port
	Name   string    `json:"name,omitempty"` // the queried name, for DNS
	Reason string    `json:"reason"`
}

// NetworkState is what a sandbox's network looks like now.
type NetworkState struct {
	Network  Network          `json:"policy"`
	Addrs    NetworkAddrs     `json:"addresses"`
	Ports    []PortMapping    `json:"ports,omitempty"`
	Counters *NetworkCounters `json:"counters,omitempty"`
	NetNS    string           `json:"netns"`
	Helper   int              `json:"helper_pid,omitempty"`
	Resolver netip.Addr       `json:"resolver"`
}

// PortMapping is a published port as bound.
type PortMapping struct {
	HostIP   string `json:"host_ip"`
	HostPort int    `json:"host_port"`
	Port     int    `json:"port"`
}

// DialAddr is the host address to dial the published port at: its bound
// address, or loopback if it is bound to every address.
func (pm PortMapping) DialAddr() string {
	ip := pm.HostIP
	if ip == "" || ip == "0.0.0.0" || ip == "::" {
		ip = "127.0.0.1"
	}
	return net.JoinHostPort(ip, strconv.Itoa(pm.HostPort))
}

// NetworkCounters are bytes and packets through the sandbox's veth.
type NetworkCounters struct {
	TxBytes   uint64 `json:"tx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
}
