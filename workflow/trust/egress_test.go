package trust

import (
	"slices"
	"testing"
)

func TestEgress(t *testing.T) {
	p := &Policy{Default: Ask, Rules: []Rule{
		{Class: Class(Net), Pattern: "pypi.org", Outcome: Allow},
		{Class: Class(Net), Pattern: "*.pythonhosted.org", Outcome: Allow},
		{Class: Class(Net), Pattern: "*.example.com", Outcome: Allow},
		{Class: Class(Net), Pattern: "evil.example.com", Outcome: Deny},
		{Class: Class(Net), Pattern: "10.0.0.0/8", Outcome: Allow},
		{Class: Class(Net), Pattern: "10.1.2.3", Outcome: Ask},
		{Class: Class(Net), Pattern: "192.0.2.7", Outcome: Allow},
		{Class: Class(Net), Pattern: "*.org", Outcome: Deny}, // reaches into pypi.org's wildcard sibling
	}}
	e := p.Egress()
	if e.Any {
		t.Fatal("Any with a default of ask")
	}
	// pypi.org and *.pythonhosted.org are below *.org, which is denied.
	if len(e.Hosts) != 0 {
		t.Fatalf("hosts %v", e.Hosts)
	}
	if !slices.Equal(e.CIDRs, []string{"192.0.2.7/32"}) {
		t.Fatalf("cidrs %v: 10.0.0.0/8 holds an ask, so it must go", e.CIDRs)
	}
	if !slices.Equal(e.Dropped, []string{"pypi.org", "*.pythonhosted.org", "*.example.com", "10.0.0.0/8"}) {
		t.Fatalf("dropped %v", e.Dropped)
	}

	p.Rules = p.Rules[:3]
	e = p.Egress()
	if !slices.Equal(e.Hosts, []string{"pypi.org", "*.pythonhosted.org", "*.example.com"}) || len(e.Dropped) != 0 {
		t.Fatalf("without denies: %+v", e)
	}
	for d, want := range map[string]bool{
		"pypi.org": true, "files.pythonhosted.org": true, "*.a.example.com": true,
		"pythonhosted.org": false, "example.com": false, "evil.org": false, "10.0.0.1": false,
	} {
		if got := e.Allows(d); got != want {
			t.Errorf("Allows(%q) = %v, want %v", d, got, want)
		}
	}

	all := &Policy{Default: Allow, Rules: []Rule{{Class: Class(Net), Pattern: "169.254.169.254", Outcome: Deny}}}
	if e := all.Egress(); e.Any || !slices.Equal(e.Dropped, []string{"*"}) {
		t.Fatalf("default allow with one deny must not allow everything: %+v", e)
	}
	if e := (&Policy{Default: Allow}).Egress(); !e.Any || !e.Allows("10.9.9.9/16") {
		t.Fatalf("default allow: %+v", e)
	}
	cidrs := Egress{CIDRs: []string{"10.0.0.0/8"}}
	if !cidrs.Allows("10.1.0.0/16") || cidrs.Allows("10.0.0.0/7") || cidrs.Allows("example.com") {
		t.Fatal("CIDR containment")
	}
}
