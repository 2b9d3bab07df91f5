package units

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "1k": 1024, "512m": 512 << 20, "2g": 2 << 30, "1.5G": 3 << 29,
		"1GiB": 1 << 30, "64MB": 64 << 20, "0": 0,
	} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "m", "-1g", "1x", "abc", "1e400"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) succeeded", bad)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 512 << 20: "512MiB", 3 << 29: "1.5GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q; want %q", n, got, want)
		}
	}
}
