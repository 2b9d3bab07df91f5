package network

import (
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"smolvm.dev/smolvm/sandbox"
)

// The firewall is one nftables table per sandbox in the host's namespace
// ("inet smolvm-<id>", IPv4 and IPv6 alike). Its base chains see only
// packets to or from the sandbox's host-side veth, so sandboxes never
// share rules, and teardown is deleting one table.
//
// For a new connection from the sandbox the order is: explicitly allowed
// CIDR → accept; an always-denied range (metadata, link-local, multicast;
// private ranges in egress mode) → log, drop; full mode → accept; egress
// mode → accept if the address is in a DNS set (admitted by the resolver
// for the answer's TTL); otherwise log, drop. The host itself (input hook)
// is reachable only on the gateway's DNS port unless a CIDR allows it.

const tablePrefix = "smolvm-"

func tableName(id string) string { return tablePrefix + id }

// Deny reasons, which are also the NFLOG prefixes the helper reads.
const (
	ReasonMetadata   = "metadata"
	ReasonLinkLocal  = "link-local"
	ReasonMulticast  = "multicast"
	ReasonPrivate    = "private"
	ReasonHost       = "host"
	ReasonNotAllowed = "not allowed"
	ReasonDNS        = "name not allowed"
	ReasonSpoofed    = "spoofed source"
)

type denied struct {
	cidr   string
	reason string
}

// alwaysDenied applies in every mode unless a CIDR explicitly allows it.
var alwaysDenied = []denied{
	{"169.254.169.254/32", ReasonMetadata}, {"fd00:ec2::254/128", ReasonMetadata},
	{"169.254.0.0/16", ReasonLinkLocal}, {"fe80::/10", ReasonLinkLocal},
	{"127.0.0.0/8", ReasonHost}, {"::1/128", ReasonHost}, {"0.0.0.0/8", ReasonHost}, {"::/128", ReasonHost},
	{"224.0.0.0/4", ReasonMulticast}, {"255.255.255.255/32", ReasonMulticast}, {"ff00::/8", ReasonMulticast},
}

// privateDenied also applies in egress mode.
var privateDenied = []denied{
	{"10.0.0.0/8", ReasonPrivate}, {"172.16.0.0/12", ReasonPrivate}, {"192.168.0.0/16", ReasonPrivate},
	{"100.64.0.0/10", ReasonPrivate}, {"198.18.0.0/15", ReasonPrivate}, {"fc00::/7", ReasonPrivate},
}

var denyReasons = []string{ReasonMetadata, ReasonLinkLocal, ReasonMulticast, ReasonPrivate, ReasonHost, ReasonNotAllowed, ReasonSpoofed}

// firewall programs one sandbox's table through conn.
type firewall struct {
	conn *nftables.Conn
	a    sandbox.NetworkAddrs
	t    *nftables.Table
}

func newFirewall(conn *nftables.Conn, id string, a sandbox.NetworkAddrs) *firewall {
	return &firewall{conn: conn, a: a, t: &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName(id)}}
}

func (f *firewall) dnsSets() (*nftables.Set, *nftables.Set) {
	return &nftables.Set{Table: f.t, Name: "dns4", KeyType: nftables.TypeIPAddr, HasTimeout: true},
		&nftables.Set{Table: f.t, Name: "dns6", KeyType: nftables.TypeIP6Addr, HasTimeout: true}
}

func (f *firewall) chain(name string) *nftables.Chain {
	return &nftables.Chain{Table: f.t, Name: name}
}

// create builds the whole table for p in one transaction.
func (f *firewall) create(p *sandbox.Network) error {
	c := f.conn
	c.AddTable(f.t)
	for _, n := range []string{"tx", "rx"} {
		c.AddObj(&nftables.CounterObj{Table: f.t, Name: n})
	}
	d4, d6 := f.dnsSets()
	for _, s := range []*nftables.Set{d4, d6} {
		if err := c.AddSet(s, nil); err != nil {
			return err
		}
	}
	for _, r := range denyReasons {
		ch := c.AddChain(f.chain(denyChain(r)))
		c.AddRule(&nftables.Rule{Table: f.t, Chain: ch, Exprs: []expr.Any{
			// A flood of denials must not flood the deny log's reader.
			&expr.Limit{Type: expr.LimitTypePkts, Rate: 50, Unit: expr.LimitTimeSecond, Burst: 50},
			&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: f.a.LogGroup, Data: []byte(r)},
		}})
		c.AddRule(&nftables.Rule{Table: f.t, Chain: ch, Exprs: verdict(expr.VerdictDrop)})
	}
	c.AddChain(f.chain("policy"))
	c.AddChain(f.chain("hostpol"))
	f.policyRules(p)

	accept := nftables.ChainPolicyAccept
	fwd := c.AddChain(&nftables.Chain{Table: f.t, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Table: f.t, Name: "input", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Table: f.t, Name: "postrouting", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	veth := f.a.HostVeth
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: f.t, Chain: ch, Exprs: join(e...)})
	}
	// Forwarded: count both ways; replies pass; new connections from the
	// sandbox go through the policy; nothing new enters the sandbox.
	add(fwd, ifname(expr.MetaKeyIIFNAME, veth, true), counter("tx"))
	add(fwd, ifname(expr.MetaKeyOIFNAME, veth, true), counter("rx"))
	add(fwd, established(), verdict(expr.VerdictAccept))
	// Root in the sandbox has raw sockets: a packet must carry the
	// sandbox's own source address to be forwarded at all.
	add(fwd, ifname(expr.MetaKeyIIFNAME, veth, true), nfproto(unix.NFPROTO_IPV4), addrNot(12, f.a.Sandbox4), jump(denyChain(ReasonSpoofed)))
	add(fwd, ifname(expr.MetaKeyIIFNAME, veth, true), nfproto(unix.NFPROTO_IPV6), addrNot(8, f.a.Sandbox6), jump(denyChain(ReasonSpoofed)))
	add(fwd, ifname(expr.MetaKeyIIFNAME, veth, true), jump("policy"))
	add(fwd, ifname(expr.MetaKeyOIFNAME, veth, true), verdict(expr.VerdictDrop))
	// To the host itself: DNS on the gateway and IPv6 neighbor discovery.
	add(in, ifname(expr.MetaKeyIIFNAME, veth, false), verdict(expr.VerdictAccept))
	add(in, counter("tx"))
	add(in, established(), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(in, daddr(f.a.Gateway4), l4proto(proto), dport(53), verdict(expr.VerdictAccept))
		add(in, daddr(f.a.Gateway6), l4proto(proto), dport(53), verdict(expr.VerdictAccept))
	}
	for _, typ := range []byte{133, 135, 136} { // router solicit, neighbor solicit/advert
		add(in, l4proto(unix.IPPROTO_ICMPV6), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
		}, verdict(expr.VerdictAccept))
	}
	add(in, jump("hostpol"))
	// The sandbox's private addresses leave the host as the host's.
	add(post, ifname(expr.MetaKeyIIFNAME, veth, true), ifname(expr.MetaKeyOIFNAME, veth, false), []expr.Any{&expr.Masq{}})
	return nil
}

// policyRules (re)fills the policy chains, which hold everything that
// depends on the policy; update swaps them in one transaction.
func (f *firewall) policyRules(p *sandbox.Network) {
	c := f.conn
	pol, host := f.chain("policy"), f.chain("hostpol")
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: f.t, Chain: ch, Exprs: join(e...)})
	}
	for _, s := range p.CIDRs {
		pfx, _ := sandbox.ParseCIDR(s)
		add(pol, inPrefix(pfx), verdict(expr.VerdictAccept))
		add(host, inPrefix(pfx), verdict(expr.VerdictAccept))
	}
	deny := alwaysDenied
	if p.Mode == sandbox.NetEgress {
		deny = append(append([]denied(nil), alwaysDenied...), privateDenied...)
	}
	for _, d := range deny {
		add(pol, inPrefix(netip.MustParsePrefix(d.cidr)), jump(denyChain(d.reason)))
	}
	if p.Mode == sandbox.NetFull {
		add(pol, verdict(expr.VerdictAccept))
	} else {
		d4, d6 := f.dnsSets()
		add(pol, nfproto(unix.NFPROTO_IPV4), payloadDaddr(4), []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: d4.Name}}, verdict(expr.VerdictAccept))
		add(pol, nfproto(unix.NFPROTO_IPV6), payloadDaddr(16), []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: d6.Name}}, verdict(expr.VerdictAccept))
	}
	add(pol, jump(denyChain(ReasonNotAllowed)))
	add(host, jump(denyChain(ReasonHost)))
}

// update replaces the policy and forgets DNS admissions, so names no
// longer allowed stop working for new connections at once.
func (f *firewall) update(p *sandbox.Network) error {
	f.conn.FlushChain(f.chain("policy"))
	f.conn.FlushChain(f.chain("hostpol"))
	f.policyRules(p)
	d4, d6 := f.dnsSets()
	f.conn.FlushSet(d4)
	f.conn.FlushSet(d6)
	return f.conn.Flush()
}

// admit lets the sandbox connect to addrs for ttl.
func (f *firewall) admit(addrs []netip.Addr, ttl time.Duration) error {
	d4, d6 := f.dnsSets()
	var e4, e6 []nftables.SetElement
	for _, a := range addrs {
		el := nftables.SetElement{Key: a.AsSlice(), Timeout: ttl}
		if a.Is4() {
			e4 = append(e4, el)
		} else {
			e6 = append(e6, el)
		}
	}
	// Deleting first makes a re-admission restart its timeout; deleting an
	// absent element would fail the batch, so add, delete, add.
	for _, x := range []struct {
		s  *nftables.Set
		el []nftables.SetElement
	}{{d4, e4}, {d6, e6}} {
		if len(x.el) == 0 {
			continue
		}
		if err := f.conn.SetAddElements(x.s, x.el); err != nil {
			return err
		}
		if err := f.conn.SetDeleteElements(x.s, x.el); err != nil {
			return err
		}
		if err := f.conn.SetAddElements(x.s, x.el); err != nil {
			return err
		}
	}
	return f.conn.Flush()
}

func (f *firewall) counters() (sandbox.NetworkCounters, error) {
	objs, err := f.conn.GetObjects(f.t)
	if err != nil {
		return sandbox.NetworkCounters{}, err
	}
	var c sandbox.NetworkCounters
	for _, o := range objs {
		if co, ok := o.(*nftables.CounterObj); ok {
			switch co.Name {
			case "tx":
				c.TxBytes, c.TxPackets = co.Bytes, co.Packets
			case "rx":
				c.RxBytes, c.RxPackets = co.Bytes, co.Packets
			}
		}
	}
	return c, nil
}

// deleteTable removes the table if it exists.
func deleteTable(conn *nftables.Conn, id string) error {
	t, err := conn.ListTableOfFamily(tableName(id), nftables.TableFamilyINet)
	if err != nil {
		return nil // absent
	}
	conn.DelTable(t)
	return conn.Flush()
}

func denyChain(reason string) string { return "deny-" + strings.ReplaceAll(reason, " ", "-") }

func join(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func counter(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: 1 /* NFT_OBJECT_COUNTER */, Name: name}}
}

func ifname(key expr.MetaKey, name string, eq bool) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: b}}
}

func established() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

// payloadDaddr loads the destination address of an IPv4 (n=4) or IPv6
// (n=16) header; callers check the family first.
func payloadDaddr(n uint32) []expr.Any {
	off := uint32(16)
	if n == 16 {
		off = 24
	}
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

// addrNot matches packets whose address at network header offset off
// (12: IPv4 source, 8: IPv6 source) is not a; callers check the family.
func addrNot(off uint32, a netip.Addr) []expr.Any {
	b := a.AsSlice()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(b))},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: b},
	}
}

func daddr(a netip.Addr) []expr.Any { return inPrefix(netip.PrefixFrom(a, a.BitLen())) }

// inPrefix matches destinations in pfx, for the prefix's family only.
func inPrefix(pfx netip.Prefix) []expr.Any {
	n, proto := uint32(4), byte(unix.NFPROTO_IPV4)
	if pfx.Addr().Is6() {
		n, proto = 16, unix.NFPROTO_IPV6
	}
	mask := make([]byte, n)
	for i := 0; i < pfx.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return join(nfproto(proto), payloadDaddr(n), []expr.Any{
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: pfx.Masked().Addr().AsSlice()},
	})
}
