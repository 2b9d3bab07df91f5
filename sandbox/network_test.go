package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p   Network
		err string // "" for valid
	}{
		{Network{}, ""},
		{Network{Mode: NetEgress, Hosts: []string{"PyPI.org.", "*.example.com"}, CIDRs: []string{"10.1.2.3", "192.168.0.0/16", "2001:db8::/32"}}, ""},
		{Network{Mode: NetFull, CIDRs: []string{"169.254.169.254/32"}}, ""},
		{Network{Mode: "open"}, `--net "open"`},
		{Network{Hosts: []string{"a.com"}}, "need --net egress"},
		{Network{Mode: NetFull, Hosts: []string{"a.com"}}, "--allow-host needs --net egress"},
		{Network{Mode: NetEgress, Hosts: []string{"a.*.com"}}, "wildcard"},
		{Network{Mode: NetEgress, Hosts: []string{"*.com"}}, "wildcard needs a domain"},
		{Network{Mode: NetEgress, Hosts: []string{"exa mple.com"}}, "not a DNS name"},
		{Network{Mode: NetEgress, Hosts: []string{"1.2.3.4"}}, "use --allow-cidr"},
		{Network{Mode: NetEgress, CIDRs: []string{"10.0.0.0/33"}}, "not a CIDR"},
		{Network{Mode: NetEgress, CIDRs: []string{"example.com"}}, "not a CIDR"},
		{Network{Mode: NetEgress, Ports: []Port{{Port: 70000}}}, "out of range"},
		{Network{Mode: NetEgress, Ports: []Port{{Port: 80, HostPort: 8080}, {Port: 81, HostPort: 8080}}}, "published twice"},
	} {
		err := tc.p.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !errors.Is(err, ErrInvalidNetwork) || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.err)
		}
	}
	p := Network{Mode: NetEgress, Hosts: []string{"PyPI.org."}, CIDRs: []string{"10.1.2.3", "10.1.2.3/8"}}
	p.Validate()
	if p.Hosts[0] != "pypi.org" || p.CIDRs[0] != "10.1.2.3/32" || p.CIDRs[1] != "10.0.0.0/8" {
		t.Errorf("not normalized: %+v", p)
	}
}

func TestAllowsName(t *testing.T) {
	p := Network{Mode: NetEgress, Hosts: []string{"pypi.org", "*.example.com"}}
	for name, want := range map[string]bool{
		"pypi.org.": true, "PYPI.ORG": true, "files.pypi.org": false, "evilpypi.org": false,
		"a.example.com": true, "a.b.example.com.": true, "example.com": false, "badexample.com": false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v", name, got)
		}
	}
	if !(&Network{Mode: NetFull}).AllowsName("anything.test") || (&Network{Mode: NetNone}).AllowsName("pypi.org") {
		t.Error("full must allow every name and none no name")
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]Port{
		"80": {Port: 80}, "8080:80": {HostPort: 8080, Port: 80}, "0.0.0.0:8080:80": {HostIP: "0.0.0.0", HostPort: 8080, Port: 80},
		"127.0.0.1::80/tcp": {HostIP: "127.0.0.1", Port: 80}, "[::1]:9000:90": {HostIP: "::1", HostPort: 9000, Port: 90},
	} {
		got, err := ParsePort(in)
		if err != nil || got != want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "80/udp", "0", "65536", "70000:80", "0:80", "a.b:80:80", "8080:x"} {
		if _, err := ParsePort(in); !errors.Is(err, ErrInvalidNetwork) {
			t.Errorf("ParsePort(%q): %v, want invalid", in, err)
		}
	}
}
