package ports

import (
	"errors"
	"testing"

	"smolvm.dev/smolvm/internal/names"
)

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		id           string
		port         int
		under, bad   bool
	}{
		{"8000-abc123.sb.test", "sb.test", "abc123", 8000, true, false},
		{"8000-ABC123.SB.test.:443", "sb.test", "abc123", 8000, true, false},
		{"49999-0123456789ab.sb.test:8080", "sb.test.", "0123456789ab", 49999, true, false},
		{"sb.test", "sb.test", "", 0, false, false},
		{"api.example.com", "sb.test", "", 0, false, false},
		{"8000-abc.sb.test", "", "", 0, false, false},
		{"8000-abc.evilsb.test", "sb.test", "", 0, false, false},
		{"abc.sb.test", "sb.test", "", 0, true, true},
		{"0-abc.sb.test", "sb.test", "", 0, true, true},
		{"70000-abc.sb.test", "sb.test", "", 0, true, true},
		{"8000-.sb.test", "sb.test", "", 0, true, true},
		{"8000-a.b.sb.test", "sb.test", "", 0, true, true},
	} {
		id, port, under, err := ParseHost(c.host, c.domain)
		if under != c.under || (err != nil) != c.bad || id != c.id || port != c.port {
			t.Errorf("ParseHost(%q, %q) = %q, %d, %v, %v", c.host, c.domain, id, port, under, err)
		}
		if err != nil && !errors.Is(err, names.ErrInvalid) {
			t.Errorf("%q: %v is not invalid", c.host, err)
		}
	}
}
