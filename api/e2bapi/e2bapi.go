// Package e2bapi holds E2B's control-plane wire types as smolvm serves them, shared by server/e2b and the cluster gateway (kube/gateway).
package e2bapi

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"

	"smolvm.dev/smolvm/internal/names"
	"smolvm.dev/smolvm/sandbox"
)

// DefaultTemplate is the SDK's default template name; it means the
// builtin image (sandbox.DefaultImage) unless a template, image or
// snapshot of that name exists.
const DefaultTemplate = "base"

// BaseImage is the image the SDK's Template().fromBaseImage() names.
const BaseImage = "e2bdev/base"

// EnvdPort is envd's port, which the SDK names in E2b-Sandbox-Port;
// every other port is the sandbox's own.
const EnvdPort = "49983"

// CodeInterpreterTemplate is @e2b/code-interpreter's default template:
// the builtin image, with smolvm's kernel server on port 49999.
const CodeInterpreterTemplate = "code-interpreter-v1"

// Error is E2B's error body; the SDK reads code and message.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// SnapshotRequest is the body of POST /sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name"`
}

// Snapshot is a sandbox snapshot as E2B describes it: its ID, which
// Sandbox.create takes as a templateID, and its names.
type Snapshot struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// SnapshotFilter is the query of GET /snapshots (listSnapshots): the
// sandbox the snapshots were taken of, and a name; "" matches any.
type SnapshotFilter struct {
	SandboxID, Name string
}

// ParseSnapshotFilter reads and checks the query of GET /snapshots.
func ParseSnapshotFilter(q url.Values) (SnapshotFilter, error) {
	f := SnapshotFilter{SandboxID: q.Get("sandboxID"), Name: q.Get("name")}
	for _, c := range []struct {
		key, v string
		kind   names.Kind
	}{{"sandboxID", f.SandboxID, names.Sandbox}, {"name", f.Name, names.Snapshot}} {
		if c.v == "" {
			continue
		}
		if err := names.Check(c.kind, c.v); err != nil {
			return f, fmt.Errorf("%s: %w", c.key, err)
		}
	}
	return f, nil
}

// Match reports whether a snapshot of sandbox sandboxID, known by names,
// passes f.
func (f SnapshotFilter) Match(sandboxID string, names []string) bool {
	return (f.SandboxID == "" || f.SandboxID == sandboxID) && (f.Name == "" || slices.Contains(names, f.Name))
}

// ForkRequest is the body of POST /sandboxes/{id}/fork: how many copies
// (default 1), and their time to live in seconds.
type ForkRequest struct {
	Timeout *int64 `json:"timeout"`
	Count   *int   `json:"count"`
}

// CreateRequest is the body of POST /sandboxes.
type CreateRequest struct {
	TemplateID      string            `json:"templateID"`
	Timeout         *int64            `json:"timeout"` // seconds
	Metadata        map[string]string `json:"metadata"`
	EnvVars         map[string]string `json:"envVars"`
	AutoPause       *bool             `json:"autoPause"`
	AutoPauseMemory *bool             `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	Network             *NetworkRequest `json:"network"`
	VolumeMounts        []VolumeMount   `json:"volumeMounts"`
}

// NetworkRequest is the part of E2B's network settings smolvm can honour:
// an allow-list of destinations, or all of them. allow_internet_access is
// here only in an update; a create has it beside.
type NetworkRequest struct {
	AllowOut            []string `json:"allowOut"`
	DenyOut             []string `json:"denyOut"`
	AllowInternetAccess *bool    `json:"allow_internet_access"`
}

// Policy maps E2B's network settings to smolvm's policy; nil when they ask
// for nothing. internet is allow_internet_access; off is how "false" maps
// (no network at create; an empty allow-list on a sandbox that has one).
func (n *NetworkRequest) Policy(internet *bool, off *sandbox.Network) (*sandbox.Network, error) {
	switch {
	case len(n.DenyOut) > 0:
		return nil, errors.New("network.denyOut: not supported; smolvm allows listed destinations (network.allowOut) and denies the rest")
	case len(n.AllowOut) > 0:
		if internet != nil && *internet {
			return nil, errors.New("network.allowOut: conflicts with allow_internet_access: true")
		}
		p := &sandbox.Network{Mode: sandbox.NetEgress}
		for _, d := range n.AllowOut {
			if _, err := netip.ParsePrefix(d); err == nil {
				p.CIDRs = append(p.CIDRs, d)
			} else if a, err := netip.ParseAddr(d); err == nil {
				p.CIDRs = append(p.CIDRs, netip.PrefixFrom(a, a.BitLen()).String())
			} else {
				p.Hosts = append(p.Hosts, d)
			}
		}
		return p, nil
	case internet != nil && *internet:
		return &sandbox.Network{Mode: sandbox.NetFull}, nil
	case internet != nil:
		return off, nil
	}
	return nil, nil
}
