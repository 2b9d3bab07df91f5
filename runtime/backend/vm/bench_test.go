package vm

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"smolvm.dev/smolvm/runtime/backend"
	"smolvm.dev/smolvm/sandbox"
)

// BenchmarkCopyWakeUp restores a checkpoint of a running VM into a
// pre-launched QEMU and times the copy until its agent answers, its first
// exec, and its second. Under TCG it also counts the blocks QEMU
// translates meanwhile: a copy's QEMU starts with none, which is where
// its wake-up goes (docs/vm.md).
func BenchmarkCopyWakeUp(b *testing.B) {
	be := testBackend(b)
	ctx := context.Background()
	root := busyboxRoot(b)
	exec := func(s *backend.Spec) time.Duration {
		start := time.Now()
		if exit, err := be.Exec(ctx, s, sandbox.Process{Args: []string{"true"}}, sandbox.Stdio{}); err != nil || exit.Code != 0 {
			b.Fatalf("exec true: %+v, %v", exit, err)
		}
		return time.Since(start)
	}
	tcg := be.Accel() == "tcg"
	src := busyboxSpec(b, root, "src")
	defer be.Delete(ctx, src)
	if err := be.Run(ctx, src); err != nil {
		b.Fatal(err)
	}
	exec(src)
	var restore, first, second time.Duration
	var toAnswer, forExec int
	for i := range b.N {
		dir := filepath.Join(b.TempDir(), "ck")
		if err := be.Checkpoint(ctx, src, dir, backend.CheckpointOptions{LeaveRunning: true}); err != nil {
			b.Fatal(err)
		}
		cp := busyboxSpec(b, root, "copy"+strconv.Itoa(i))
		if err := be.Create(ctx, cp); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := be.Restore(ctx, cp, dir); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(start)
		if tcg {
			toAnswer += translated(b, cp)
		}
		first += exec(cp)
		if tcg {
			forExec += translated(b, cp)
		}
		second += exec(cp)
		if err := be.Delete(ctx, cp); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms")
	b.ReportMetric(float64(first.Milliseconds())/n, "first-exec-ms")
	b.ReportMetric(float64(second.Milliseconds())/n, "second-exec-ms")
	if tcg {
		b.ReportMetric(float64(toAnswer)/n, "TBs-to-answer")
		b.ReportMetric(float64(forExec-toAnswer)/n, "TBs-first-exec")
	}
	b.Logf("accelerator %s, load %s", be.Accel(), loadAvg())
}

var tbCount = regexp.MustCompile(`TB count\s+(\d+)`)

// translated reads how many blocks s's QEMU has translated so far, from
// HMP's "info jit" (TCG only).
func translated(b *testing.B, s *backend.Spec) int {
	b.Helper()
	ctx := context.Background()
	q, err := dialQMP(ctx, layout{s.Dir}.qmp())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	out, err := q.run(ctx, "human-monitor-command", map[string]any{"command-line": "info jit"})
	if err != nil {
		b.Fatal(err)
	}
	var text string
	if err := json.Unmarshal(out, &text); err != nil {
		b.Fatal(err)
	}
	m := tbCount.FindStringSubmatch(text)
	if m == nil {
		b.Fatalf("info jit has no TB count: %q", text)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
