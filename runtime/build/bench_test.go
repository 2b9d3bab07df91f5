package build_test

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/series"
	"smolvm.dev/smolvm/runtime/build"
)

// benchDockerfile has five steps: a package installed from a local
// tarball (with busybox), a WORKDIR, the app's copy and its build.
const benchDockerfile = `FROM scratch
COPY busybox pkg.tar.gz /install/
RUN ["/install/busybox", "sh", "-c", "set -e; /install/busybox mkdir -p /bin /opt; /install/busybox cp /install/busybox /bin/busybox; /bin/busybox --install -s /bin; tar xzf /install/pkg.tar.gz -C /opt; rm -r /install"]
WORKDIR /app
COPY app/ ./
RUN sh build.sh
`

// benchContext writes the context: busybox, a package of 2,000 small
// files, and the app whose build.sh line the rebuilds change.
func benchContext(b *testing.B) string {
	dir := withBusybox(b, map[string]string{
		"app/build.sh": "find /opt -type f | wc -l > count\necho build 0 > out\n",
		"app/README":   "an app\n",
	})
	f, err := os.Create(filepath.Join(dir, "pkg.tar.gz"))
	if err != nil {
		b.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for i := range 2000 {
		body := []byte(strings.Repeat(fmt.Sprintf("file %d\n", i), 50))
		hdr := &tar.Header{Name: fmt.Sprintf("pkg/lib/m%02d/f%04d.js", i%40, i), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			b.Fatal(err)
		}
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	zw.Close()
	f.Close()
	return dir
}

// touchApp changes one line of the app, as an edit between builds does.
func touchApp(b *testing.B, dir string, i int) {
	body := fmt.Sprintf("find /opt -type f | wc -l > count\necho build %d > out\n", i+1)
	if err := os.WriteFile(filepath.Join(dir, "app/build.sh"), []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBuild: a cold build (--no-cache) and a rebuild after a one-line
// change to the app, by smolvm and, when it is installed, by buildah
// (Debian's, --isolation chroot, its own storage) on the same context.
func BenchmarkBuild(b *testing.B) {
	b.Run("smolvm", func(b *testing.B) {
		w := newWorld(b)
		dir := benchContext(b)
		do := func(o build.Options) error {
			_, out, err := w.build(dir, benchDockerfile, o)
			if err != nil {
				return fmt.Errorf("%w\n%s", err, out)
			}
			return nil
		}
		if err := do(build.Options{Tags: []string{"bench"}}); err != nil {
			b.Fatal(err)
		}
		measure(b, dir, "smolvm", func() error { return do(build.Options{Tags: []string{"bench"}, NoCache: true}) },
			func() error { return do(build.Options{Tags: []string{"bench"}}) })
	})
	b.Run("buildah", func(b *testing.B) {
		bin, err := exec.LookPath("buildah")
		if err != nil {
			b.Skip("no buildah (apt-get install buildah)")
		}
		dir := benchContext(b)
		store := b.TempDir()
		bud := func(extra ...string) error {
			args := append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
				"bud", "--isolation", "chroot", "--layers", "-q", "-t", "bench", "-f", "-"}, extra...)
			cmd := exec.Command(bin, append(args, dir)...)
			cmd.Stdin = strings.NewReader(benchDockerfile)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("buildah: %w\n%s", err, out)
			}
			return nil
		}
		if err := bud(); err != nil {
			b.Fatal(err)
		}
		measure(b, dir, "buildah", func() error { return bud("--no-cache") }, func() error { return bud() })
	})
}

// measure times b.N cold builds and b.N one-line-change rebuilds.
func measure(b *testing.B, dir, who string, cold, rebuild func() error) {
	coldS := series.Series{Name: who + " cold build"}
	reS := series.Series{Name: who + " rebuild after a one-line change"}
	load := loadavg()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := cold(); err != nil {
			b.Fatal(err)
		}
		coldS.Samples = append(coldS.Samples, time.Since(start))
		touchApp(b, dir, i)
		start = time.Now()
		if err := rebuild(); err != nil {
			b.Fatal(err)
		}
		reS.Samples = append(reS.Samples, time.Since(start))
	}
	b.StopTimer()
	b.Logf("load average before: %s, after: %s", load, loadavg())
	for _, s := range []series.Series{coldS, reS} {
		b.Logf("%s: p50 %v p99 %v (n=%d)", s.Name, s.Quantile(0.5).Round(time.Millisecond), s.Quantile(0.99).Round(time.Millisecond), len(s.Samples))
	}
	b.ReportMetric(float64(coldS.Quantile(0.5).Milliseconds()), "cold-p50-ms")
	b.ReportMetric(float64(reS.Quantile(0.5).Milliseconds()), "rebuild-p50-ms")
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
