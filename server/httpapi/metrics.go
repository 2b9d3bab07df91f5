package httpapi

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"smolvm.dev/smolvm/runtime/tenant"
	"smolvm.dev/smolvm/sandbox"
)

// Prometheus text exposition, written by hand: a few counters and
// histograms do not need a client library.

// buckets are the latency histogram's upper bounds, in seconds.
var buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

type metrics struct {
	mu     sync.Mutex
	routes map[string]*routeMetrics
}

type routeMetrics struct {
	mu     sync.Mutex
	codes  map[int]uint64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	total  uint64
}

func newMetrics() *metrics { return &metrics{routes: map[string]*routeMetrics{}} }

func (m *metrics) route(pattern string) *routeMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &routeMetrics{codes: map[int]uint64{}, counts: make([]uint64, len(buckets)+1)}
	m.routes[pattern] = r
	return r
}

func (r *routeMetrics) observe(status int, d time.Duration) {
	sec := d.Seconds()
	i := sort.SearchFloat64s(buckets, sec)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes[status]++
	r.counts[i]++
	r.sum += sec
	r.total++
}

// write renders every metric; sandboxes by state come from states.
func (m *metrics) write(w io.Writer, states map[sandbox.State]int, inFlight int) {
	m.mu.Lock()
	names := make([]string, 0, len(m.routes))
	for n := range m.routes {
		names = append(names, n)
	}
	m.mu.Unlock()
	slices.Sort(names)

	fmt.Fprintln(w, "# HELP smolvm_sandboxes Sandboxes by state.")
	fmt.Fprintln(w, "# TYPE smolvm_sandboxes gauge")
	for _, st := range []sandbox.State{sandbox.StateCreating, sandbox.StateCreated, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped, sandbox.StateExpired} {
		fmt.Fprintf(w, "smolvm_sandboxes{state=%q} %d\n", st, states[st])
	}
	fmt.Fprintln(w, "# HELP smolvm_api_in_flight Requests holding a concurrency slot.")
	fmt.Fprintln(w, "# TYPE smolvm_api_in_flight gauge")
	fmt.Fprintf(w, "smolvm_api_in_flight %d\n", inFlight)

	type snap struct {
		name   string
		codes  map[int]uint64
		counts []uint64
		sum    float64
		total  uint64
	}
	var snaps []snap
	for _, n := range names {
		m.mu.Lock()
		r := m.routes[n]
		m.mu.Unlock()
		r.mu.Lock()
		s := snap{name: n, codes: maps.Clone(r.codes), counts: slices.Clone(r.counts), sum: r.sum, total: r.total}
		r.mu.Unlock()
		snaps = append(snaps, s)
	}
	fmt.Fprintln(w, "# HELP smolvm_api_requests_total API requests by route and status.")
	fmt.Fprintln(w, "# TYPE smolvm_api_requests_total counter")
	for _, s := range snaps {
		for _, c := range sortedKeys(s.codes) {
			fmt.Fprintf(w, "smolvm_api_requests_total{route=%q,code=\"%d\"} %d\n", s.name, c, s.codes[c])
		}
	}
	fmt.Fprintln(w, "# HELP smolvm_api_errors_total API requests answered with an error status (4xx, 5xx).")
	fmt.Fprintln(w, "# TYPE smolvm_api_errors_total counter")
	for _, s := range snaps {
		for _, c := range sortedKeys(s.codes) {
			if c >= 400 {
				fmt.Fprintf(w, "smolvm_api_errors_total{route=%q,code=\"%d\"} %d\n", s.name, c, s.codes[c])
			}
		}
	}
	fmt.Fprintln(w, "# HELP smolvm_api_request_duration_seconds API request latency by route (streams: until the stream ends).")
	fmt.Fprintln(w, "# TYPE smolvm_api_request_duration_seconds histogram")
	for _, s := range snaps {
		var cum uint64
		for i, b := range buckets {
			cum += s.counts[i]
			fmt.Fprintf(w, "smolvm_api_request_duration_seconds_bucket{route=%q,le=%q} %d\n", s.name, strconv.FormatFloat(b, 'g', -1, 64), cum)
		}
		fmt.Fprintf(w, "smolvm_api_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", s.name, s.total)
		fmt.Fprintf(w, "smolvm_api_request_duration_seconds_sum{route=%q} %g\n", s.name, s.sum)
		fmt.Fprintf(w, "smolvm_api_request_duration_seconds_count{route=%q} %d\n", s.name, s.total)
	}
}

func sortedKeys(m map[int]uint64) []int { return slices.Sorted(maps.Keys(m)) }

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if _, scoped := tenant.Of(r.Context()); scoped {
		writeError(w, tenant.ErrAdminOnly) // the counts are the whole server's
		return
	}
	sbs, err := s.o.Manager.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	states := map[sandbox.State]int{}
	for _, sb := range sbs {
		states[sb.State]++
	}
	usage, err := s.o.Manager.Usage(r.Context(), time.Time{}, "", sandbox.UsageByTenant)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(w, states, s.limit.InFlight())
	writeUsage(w, usage)
}

// writeUsage writes each tenant's usage since records began as counters
// ("" is the admin's).
func writeUsage(w io.Writer, usage []sandbox.Usage) {
	for _, m := range []struct {
		name, help string
		v          func(sandbox.Usage) float64
	}{
		{"smolvm_tenant_sandbox_seconds_total", "Time sandboxes ran (paused time excluded).", func(u sandbox.Usage) float64 { return u.SandboxSeconds }},
		{"smolvm_tenant_cpu_seconds_total", "CPU time sandboxes used.", func(u sandbox.Usage) float64 { return u.CPUSeconds }},
		{"smolvm_tenant_memory_gib_seconds_total", "Memory limits times running time.", func(u sandbox.Usage) float64 { return u.MemoryGiBSeconds }},
		{"smolvm_tenant_snapshot_gib_hours_total", "Snapshot storage held over time.", func(u sandbox.Usage) float64 { return u.SnapshotGiBHours }},
		{"smolvm_tenant_egress_bytes_total", "Bytes sandboxes sent through their network.", func(u sandbox.Usage) float64 { return float64(u.EgressBytes) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
		for _, u := range usage {
			fmt.Fprintf(w, "%s{tenant=%q} %g\n", m.name, u.Tenant, m.v(u))
		}
	}
}
