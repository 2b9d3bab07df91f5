package manager

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"unicode"
	"unicode/utf8"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

func validName(name string) error { return names.Check(names.Sandbox, name) }

// newBuildID returns a random 32-hex-digit template build ID.
func newBuildID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newID returns a random 12-hex-digit ID, short enough to type.
func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newMachineID returns a random /etc/machine-id: 32 lowercase hex digits.
func newMachineID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validate fills defaults and checks bounds.
func validate(c *sandbox.Config) error {
	l := &c.Limits
	switch {
	case l.CPUs < 0:
		return fmt.Errorf("%w: --cpus %g: must be positive", sandbox.ErrInvalid, l.CPUs)
	case l.CPUs == 0:
		l.CPUs = sandbox.DefaultCPUs
	case l.CPUs > float64(runtime.NumCPU()):
		return fmt.Errorf("%w: --cpus %g: this host has %d CPUs", sandbox.ErrInvalid, l.CPUs, runtime.NumCPU())
	}
	if l.Memory == 0 {
		l.Memory = sandbox.DefaultMemory
	} else if l.Memory < sandbox.MinMemory {
		return fmt.Errorf("%w: --memory %d bytes: at least %d MiB is needed", sandbox.ErrInvalid, l.Memory, sandbox.MinMemory>>20)
	}
	if l.Pids == 0 {
		l.Pids = sandbox.DefaultPids
	} else if l.Pids < sandbox.MinPids || l.Pids > sandbox.MaxPids {
		return fmt.Errorf("%w: --pids %d: must be between %d and %d", sandbox.ErrInvalid, l.Pids, sandbox.MinPids, sandbox.MaxPids)
	}
	if l.Disk == 0 {
		l.Disk = sandbox.DefaultDisk
	} else if l.Disk < sandbox.MinDisk {
		return fmt.Errorf("%w: --disk %d bytes: at least %d MiB is needed", sandbox.ErrInvalid, l.Disk, sandbox.MinDisk>>20)
	}
	if c.TTL < 0 {
		return fmt.Errorf("%w: --timeout %s: must not be negative", sandbox.ErrInvalid, c.TTL)
	}
	if c.OnExpiry != "" && c.OnExpiry != sandbox.ExpiryStop && c.OnExpiry != sandbox.ExpiryPause {
		return fmt.Errorf("%w: on expiry %q: want %q or %q", sandbox.ErrInvalid, c.OnExpiry, sandbox.ExpiryStop, sandbox.ExpiryPause)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("%w: --idle-timeout %s: must not be negative", sandbox.ErrInvalid, c.IdleTimeout)
	}
	if c.Network != nil {
		if err := c.Network.Validate(); err != nil {
			return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
		}
		if !c.Network.Enabled() {
			c.Network = nil
		}
	}
	return checkLabels(c.Labels)
}

// checkLabels bounds a sandbox's labels: how many, their sizes, and text
// that prints (UTF-8, no control characters; no '=' in a key, which
// usage by label joins them with).
func checkLabels(l map[string]string) error {
	if len(l) > sandbox.MaxLabels {
		return fmt.Errorf("%w: %d labels: at most %d", sandbox.ErrInvalid, len(l), sandbox.MaxLabels)
	}
	printable := func(s string) bool {
		return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
	}
	if v, ok := l[sandbox.LabelWarm]; ok {
		if _, _, err := sandbox.ParseWarm(v); err != nil {
			return err
		}
	}
	for k, v := range l {
		switch {
		case k == "" || len(k) > sandbox.MaxLabelKeyLen || strings.Contains(k, "=") || !printable(k):
			return fmt.Errorf("%w: label key %q: want 1 to %d printable bytes without '='", sandbox.ErrInvalid, k, sandbox.MaxLabelKeyLen)
		case len(v) > sandbox.MaxLabelValueLen || !printable(v):
			return fmt.Errorf("%w: label %s: value of %d bytes: want at most %d printable bytes", sandbox.ErrInvalid, k, len(v), sandbox.MaxLabelValueLen)
		}
	}
	return nil
}
