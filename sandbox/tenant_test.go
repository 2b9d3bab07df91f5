package sandbox

import (
	"errors"
	"math"
	"strings"
	"testing"

	"smolvm.dev/smolvm/errdefs"
)

// TestQuotaCheck: every limit from 0 to its maximum passes; one below,
// above or not a number is an invalid QuotaError naming its field.
func TestQuotaCheck(t *testing.T) {
	if err := (Quota{}).Check(); err != nil {
		t.Fatalf("no limits: %v", err)
	}
	most := Quota{Sandboxes: MaxQuotaCount, Memory: MaxQuotaBytes, CPUs: MaxQuotaCount, SnapshotBytes: MaxQuotaBytes, Pools: MaxQuotaCount, CreatesPerMinute: MaxQuotaCount}
	if err := most.Check(); err != nil {
		t.Fatalf("the maxima: %v", err)
	}
	for _, c := range []struct {
		field string
		q     Quota
	}{
		{"sandboxes", Quota{Sandboxes: -1}}, {"memory", Quota{Memory: MaxQuotaBytes + 1}}, {"snapshot_bytes", Quota{SnapshotBytes: math.MaxInt64}},
		{"pools", Quota{Pools: MaxQuotaCount + 1}}, {"creates_per_minute", Quota{CreatesPerMinute: -5}},
		{"cpus", Quota{CPUs: 1e308}}, {"cpus", Quota{CPUs: math.NaN()}}, {"cpus", Quota{CPUs: math.Inf(1)}}, {"cpus", Quota{CPUs: -0.5}},
	} {
		q, field := c.q, c.field
		err := q.Check()
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Field != field || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `"`+field+`"`) {
			t.Errorf("%+v: %v, want an invalid quota naming %q", q, err, field)
		}
	}
}
