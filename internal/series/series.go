// Package series holds a measured operation's samples and their
// quantiles; it imports nothing of smolvm, so that any package's
// benchmarks can use it (package bench imports the API server).
package series

import (
	"slices"
	"time"
)

// Series is one measured operation.
type Series struct {
	Name     string
	Baseline string // name of the series it is compared with, if any
	Samples  []time.Duration
}

// Quantile returns the q-quantile (nearest rank).
func (s Series) Quantile(q float64) time.Duration {
	if len(s.Samples) == 0 {
		return 0
	}
	d := slices.Clone(s.Samples)
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[max(0, min(i, len(d)-1))]
}
