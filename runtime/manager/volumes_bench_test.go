package manager

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// BenchmarkVolume measures what a volume costs, each iteration doing both
// sides one after the other so that both see the same load: a create until
// the first exec answers, without and with a volume mounted (its host
// mount exists already: what is timed is the bind mount and the gofer);
// and 32 MiB written with fsync into the sandbox's writable layer and into
// the volume.
func BenchmarkVolume(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	if _, err := m.CreateVolume(ctx, sandbox.VolumeOptions{Name: "bench", Size: 256 << 20}); err != nil {
		b.Fatal(err)
	}
	vols := []sandbox.VolumeMount{{Name: "bench", Path: "/v"}}
	var plain, withVol, writeLayer, writeVol []time.Duration
	create := func(cfg sandbox.Config, into *[]time.Duration) *sandbox.Sandbox {
		t := time.Now()
		sb, err := m.Create(ctx, sandbox.CreateOptions{Start: true, Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
			b.Fatal(err, exit)
		}
		*into = append(*into, time.Since(t))
		return sb
	}
	write := func(sb *sandbox.Sandbox, dir string, into *[]time.Duration) {
		t := time.Now()
		exit, err := m.Exec(ctx, sb.ID, sandbox.Process{Args: []string{"dd", "if=/dev/zero", "of=" + dir + "/f", "bs=1M", "count=32", "conv=fsync"}}, sandbox.Stdio{})
		if err != nil || exit.Code != 0 {
			b.Fatal(err, exit)
		}
		*into = append(*into, time.Since(t))
	}
	for b.Loop() {
		a := create(sandbox.Config{}, &plain)
		v := create(sandbox.Config{Volumes: vols}, &withVol)
		write(a, "/tmp", &writeLayer)
		write(v, "/v", &writeVol)
		b.StopTimer()
		m.Remove(ctx, a.ID, true)
		m.Remove(ctx, v.ID, true)
		b.StartTimer()
	}
	for _, s := range []struct {
		name    string
		samples []time.Duration
	}{{"create", plain}, {"create-volume", withVol}, {"write32M-layer", writeLayer}, {"write32M-volume", writeVol}} {
		p50, p99 := quantiles(s.samples)
		b.ReportMetric(p50, s.name+"-p50-ms")
		b.ReportMetric(p99, s.name+"-p99-ms")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average: %s", strings.TrimSpace(string(load)))
}
