package sandbox

import (
	"fmt"
	"strconv"
	"time"

	"smolvm.dev/smolvm/errdefs"
)

// Quota bounds what a tenant's sandboxes may hold at once, and how fast it
// may create them. Zero is no limit.
type Quota struct {
	// Sandboxes counts sandboxes not stopped (creating, created, running,
	// paused); a fork of N counts N.
	Sandboxes int `json:"sandboxes,omitempty"`
	// Memory and CPUs sum the limits of those sandboxes.
	Memory int64   `json:"memory,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
	// SnapshotBytes sums the sizes of the tenant's snapshots.
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
	// VolumeBytes sums the sizes (quotas) of the tenant's volumes.
	VolumeBytes int64 `json:"volume_bytes,omitempty"`
	Pools       int   `json:"pools,omitempty"`
	// CreatesPerMinute bounds creates, restores and fork copies in any
	// minute.
	CreatesPerMinute int `json:"creates_per_minute,omitempty"`
}

// The largest quota limits: far above what one server holds, and small
// enough that sums over a tenant's sandboxes stay exact.
const (
	MaxQuotaCount = 1_000_000 // sandboxes, vCPUs, pools, creates per minute
	MaxQuotaBytes = 1 << 50   // memory, snapshot and volume bytes: 1 PiB
)

// QuotaError is a quota limit out of range; Field is its JSON name. It is
// of class invalid.
type QuotaError struct {
	Field, Value string
	Max          int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota %q: %s is out of range: want 0 (no limit) to %d", e.Field, e.Value, e.Max)
}

func (e *QuotaError) Is(target error) bool { return target == errdefs.ErrInvalid }

// Check returns a *QuotaError for the first limit of q that is negative,
// over its maximum or not a number.
func (q Quota) Check() error {
	for _, l := range []struct {
		field string
		value int64
		max   int64
	}{
		{"sandboxes", int64(q.Sandboxes), MaxQuotaCount}, {"memory", q.Memory, MaxQuotaBytes},
		{"snapshot_bytes", q.SnapshotBytes, MaxQuotaBytes}, {"volume_bytes", q.VolumeBytes, MaxQuotaBytes}, {"pools", int64(q.Pools), MaxQuotaCount},
		{"creates_per_minute", int64(q.CreatesPerMinute), MaxQuotaCount},
	} {
		if l.value < 0 || l.value > l.max {
			return &QuotaError{Field: l.field, Value: strconv.FormatInt(l.value, 10), Max: l.max}
		}
	}
	if !(q.CPUs >= 0 && q.CPUs <= MaxQuotaCount) { // NaN too
		return &QuotaError{Field: "cpus", Value: strconv.FormatFloat(q.CPUs, 'g', -1, 64), Max: MaxQuotaCount}
	}
	return nil
}

// Tenant is one tenant and its keys (never the keys' secrets).
type Tenant struct {
	Name      string      `json:"name"`
	Quota     Quota       `json:"quota"`
	CreatedAt time.Time   `json:"created_at"`
	Keys      []TenantKey `json:"keys"`
}

// TenantKey is one API key of a tenant. Its secret is shown once, when
// it is made.
type TenantKey struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// Usage is what a tenant's sandboxes used over a period, summed by
// tenant, or by tenant and sandbox.
type Usage struct {
	Tenant string `json:"tenant"` // "" is the admin's
	// Sandbox names the sandbox (by ID) when usage is broken down by it.
	Sandbox          string  `json:"sandbox,omitempty"`
	SandboxSeconds   float64 `json:"sandbox_seconds"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	SnapshotGiBHours float64 `json:"snapshot_gib_hours"`
	// Label is the key=value the row sums, when broken down by label.
	Label string `json:"label,omitempty"`
	// EgressBytes is what the sandboxes sent through their network (to
	// the host and beyond).
	EgressBytes int64 `json:"egress_bytes"`
}

// How usage is broken down: each row sums a tenant, a sandbox, or a
// label's key=value (a sandbox with two labels counts in two rows).
const (
	UsageByTenant  = "tenant"
	UsageBySandbox = "sandbox"
	UsageByLabel   = "label"
)
