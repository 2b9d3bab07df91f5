package network

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"smolvm.dev/smolvm/runtime/store"
	"smolvm.dev/smolvm/sandbox"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p   sandbox.Network
		err string // "" for valid
	}{
		{sandbox.Network{}, ""},
		{sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"PyPI.org.", "*.example.com"}, CIDRs: []string{"10.1.2.3", "192.168.0.0/16", "2001:db8::/32"}}, ""},
		{sandbox.Network{Mode: sandbox.NetFull, CIDRs: []string{"169.254.169.254/32"}}, ""},
		{sandbox.Network{Mode: "open"}, `--net "open"`},
		{sandbox.Network{Hosts: []string{"a.com"}}, "need --net egress"},
		{sandbox.Network{Mode: sandbox.NetFull, Hosts: []string{"a.com"}}, "--allow-host needs --net egress"},
		{sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"a.*.com"}}, "wildcard"},
		{sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"*.com"}}, "wildcard needs a domain"},
		{sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"exa mple.com"}}, "not a DNS name"},
		{sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"1.2.3.4"}}, "use --allow-cidr"},
		{sandbox.Network{Mode: sandbox.NetEgress, CIDRs: []string{"10.0.0.0/33"}}, "not a CIDR"},
		{sandbox.Network{Mode: sandbox.NetEgress, CIDRs: []string{"example.com"}}, "not a CIDR"},
		{sandbox.Network{Mode: sandbox.NetEgress, Ports: []sandbox.Port{{Port: 70000}}}, "out of range"},
		{sandbox.Network{Mode: sandbox.NetEgress, Ports: []sandbox.Port{{Port: 80, HostPort: 8080}, {Port: 81, HostPort: 8080}}}, "published twice"},
	} {
		err := tc.p.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !errors.Is(err, sandbox.ErrInvalidNetwork) || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.err)
		}
	}
	p := sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"PyPI.org."}, CIDRs: []string{"10.1.2.3", "10.1.2.3/8"}}
	p.Validate()
	if p.Hosts[0] != "pypi.org" || p.CIDRs[0] != "10.1.2.3/32" || p.CIDRs[1] != "10.0.0.0/8" {
		t.Errorf("not normalized: %+v", p)
	}
}

func TestAllowsName(t *testing.T) {
	p := sandbox.Network{Mode: sandbox.NetEgress, Hosts: []string{"pypi.org", "*.example.com"}}
	for name, want := range map[string]bool{
		"pypi.org.": true, "PYPI.ORG": true, "files.pypi.org": false, "evilpypi.org": false,
		"a.example.com": true, "a.b.example.com.": true, "example.com": false, "badexample.com": false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v", name, got)
		}
	}
	if !(&sandbox.Network{Mode: sandbox.NetFull}).AllowsName("anything.test") || (&sandbox.Network{Mode: sandbox.NetNone}).AllowsName("pypi.org") {
		t.Error("full must allow every name and none no name")
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]sandbox.Port{
		"80": {Port: 80}, "8080:80": {HostPort: 8080, Port: 80}, "0.0.0.0:8080:80": {HostIP: "0.0.0.0", HostPort: 8080, Port: 80},
		"127.0.0.1::80/tcp": {HostIP: "127.0.0.1", Port: 80}, "[::1]:9000:90": {HostIP: "::1", HostPort: 9000, Port: 90},
	} {
		got, err := sandbox.ParsePort(in)
		if err != nil || got != want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "80/udp", "0", "65536", "70000:80", "0:80", "a.b:80:80", "8080:x"} {
		if _, err := sandbox.ParsePort(in); !errors.Is(err, sandbox.ErrInvalidNetwork) {
			t.Errorf("ParsePort(%q): %v, want invalid", in, err)
		}
	}
}

func TestDescribePacket(t *testing.T) {
	v4 := make([]byte, 24)
	v4[0], v4[9] = 0x45, 6
	copy(v4[16:], []byte{203, 0, 113, 20})
	v4[22], v4[23] = 0, 80
	if p, d := describePacket(v4); p != "tcp" || d != "203.0.113.20:80" {
		t.Errorf("v4: %s %s", p, d)
	}
	v6 := make([]byte, 48)
	v6[0], v6[6] = 0x60, 17
	v6[24], v6[25], v6[39] = 0x20, 0x01, 1
	v6[42], v6[43] = 0, 53
	if p, d := describePacket(v6); p != "udp" || d != "[2001::1]:53" {
		t.Errorf("v6: %s %s", p, d)
	}
	if p, _ := describePacket([]byte{0x45}); p != "ipv4" {
		t.Errorf("short: %s", p)
	}
}

// TestAllocateConcurrent allocates from many goroutines over one database,
// as concurrent CLIs do: every sandbox gets a different slot, and released
// slots are reused.
func TestAllocateConcurrent(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx, "network", schema); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	slots := map[int]string{}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("%012x", i)
			a, err := allocate(ctx, st, id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, ok := slots[a.Slot]; ok {
				t.Errorf("slot %d given to %s and %s", a.Slot, other, id)
			}
			slots[a.Slot] = id
		}()
	}
	wg.Wait()
	if len(slots) != 32 {
		t.Fatalf("%d slots for 32 sandboxes", len(slots))
	}
	release(ctx, st, slots[5])
	a, err := allocate(ctx, st, "new")
	if err != nil || a.Slot != 5 {
		t.Fatalf("after releasing slot 5: %+v, %v", a, err)
	}
	if a.Gateway4.String() != "10.213.0.21" || a.Sandbox4.String() != "10.213.0.22" || a.Sandbox6.String() != "fd73:6d6f:6c76:5::2" {
		t.Errorf("addresses of slot 5: %+v", a)
	}
}
