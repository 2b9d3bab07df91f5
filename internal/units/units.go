// Package units parses and formats byte sizes the way docker's flags do,
// and the start times of reports.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseBytes parses sizes such as "512m", "1.5g", "1GiB" or "4096". Single
// letter suffixes are binary (k = 1024), as in docker's --memory.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512m, 2g)", s)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// FormatBytes renders n with a binary unit, e.g. "512MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + string("KMGTP"[exp]) + "iB"
}

// ParseSince reads a start time: a duration back from now ("24h"), an
// RFC 3339 time, or "" for the last 30 days.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now.Add(-30 * 24 * time.Hour), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a duration (24h) or an RFC 3339 time", v)
	}
	return t, nil
}
