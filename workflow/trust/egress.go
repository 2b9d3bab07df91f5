package trust

import (
	"net/netip"
	"strings"
)

// Egress is what a policy lets a sandbox connect to, in the terms a
// network allow-list enforces: DNS names, and addresses or CIDRs.
type Egress struct {
	Any   bool     // every destination
	Hosts []string // example.com, *.example.com
	CIDRs []string // 192.0.2.0/24, 2001:db8::1/128
	// Dropped are allowed patterns left out because a deny or ask rule
	// covers part of them: an allow-list cannot carve out exceptions, and
	// an ask cannot be put to a person in the middle of a connect.
	Dropped []string
}

// Egress returns the destinations the policy allows outright. A pattern is
// kept only if no deny or ask rule reaches into it, so the result never
// allows what the policy would refuse.
func (p *Policy) Egress() Egress {
	var allow, other []string
	for _, r := range p.Rules {
		if r.Class != Class(Net) {
			continue
		}
		if r.Outcome == Allow {
			allow = append(allow, strings.ToLower(r.Pattern))
		} else {
			other = append(other, strings.ToLower(r.Pattern))
		}
	}
	if p.Default == Allow {
		allow = append(allow, "*")
	}
	var e Egress
	for _, a := range allow {
		if overlapsAny(a, other) {
			e.Dropped = append(e.Dropped, a)
			continue
		}
		switch {
		case a == "*":
			e.Any = true
		case strings.Contains(a, "/"):
			e.CIDRs = append(e.CIDRs, a)
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				e.CIDRs = append(e.CIDRs, netip.PrefixFrom(ip, ip.BitLen()).String())
			} else {
				e.Hosts = append(e.Hosts, strings.TrimSuffix(a, "."))
			}
		}
	}
	return e
}

// Allows reports whether every destination pattern d (a name, a wildcard
// name, an address or a CIDR) lies within what e allows.
func (e Egress) Allows(d string) bool {
	if e.Any {
		return true
	}
	d = strings.ToLower(d)
	if pre, ok := prefix(d); ok {
		for _, c := range e.CIDRs {
			if cp, ok := prefix(c); ok && cp.Bits() <= pre.Bits() && cp.Contains(pre.Addr()) {
				return true
			}
		}
		return false
	}
	for _, h := range e.Hosts {
		if h == d || strings.HasPrefix(h, "*.") && strings.HasSuffix(strings.TrimPrefix(d, "*."), h[1:]) {
			return true
		}
	}
	return false
}

func overlapsAny(a string, others []string) bool {
	for _, o := range others {
		if overlaps(a, o) {
			return true
		}
	}
	return false
}

// overlaps reports whether some destination matches both patterns.
func overlaps(a, b string) bool {
	if a == "*" || b == "*" {
		return true
	}
	pa, aIP := prefix(a)
	pb, bIP := prefix(b)
	if aIP || bIP {
		return aIP && bIP && (pa.Contains(pb.Addr()) || pb.Contains(pa.Addr()))
	}
	// Names: *.d is every name strictly below d.
	da, wa := strings.CutPrefix(strings.TrimSuffix(a, "."), "*.")
	db, wb := strings.CutPrefix(strings.TrimSuffix(b, "."), "*.")
	below := func(n, d string) bool { return strings.HasSuffix(n, "."+d) }
	switch {
	case wa && wb:
		return da == db || below(da, db) || below(db, da)
	case wa:
		return below(db, da)
	case wb:
		return below(da, db)
	}
	return da == db
}

// prefix parses an address or CIDR pattern as a prefix.
func prefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err == nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ip.BitLen()), true
}
