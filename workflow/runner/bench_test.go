package runner

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/internal/bench/series"
	"smolvm.dev/smolvm/internal/testenv"
	"smolvm.dev/smolvm/workflow/runner/guard"
	"smolvm.dev/smolvm/workflow/trust"
)

func report(b *testing.B, prefix string, samples []time.Duration) {
	s := series.Series{Samples: samples}
	b.ReportMetric(float64(s.Quantile(0.5).Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(s.Quantile(0.99).Microseconds())/1000, prefix+"p99-ms")
}

// benchRun is a run over jsRepo with its first sandbox, as Fix sets up.
func benchRun(b *testing.B) (*run, string) {
	rn := newRunner(b)
	repo := testenv.GitRepo(b, jsRepo)
	ctx := context.Background()
	o := Options{Repo: repo, Test: jsTest, Agent: &script{}, Policy: trust.Default(repo)}
	if err := o.defaults(); err != nil {
		b.Fatal(err)
	}
	r := &run{svc: rn.Service, log: rn.Log, o: o, id: NewRunID(), flaky: map[string]bool{}, rec: &Run{}}
	if err := r.open(ctx, ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.scr.close)
	sb, err := r.newBox(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.remove(ctx, sb) })
	if r.baseResult, err = r.runTests(ctx, sb); err != nil {
		b.Fatal(err)
	}
	if r.baseSnap, err = r.snapshot(ctx, sb, 0); err != nil {
		b.Fatal(err)
	}
	return r, sb
}

// BenchmarkAgentIteration is what smolvm adds to one loop iteration: the
// agent's change copied out and committed, the guard, the tests in the
// sandbox and the checkpoint, against the same test command on the host
// in the same run.
func BenchmarkAgentIteration(b *testing.B) {
	r, sb := benchRun(b)
	ctx := context.Background()
	var host, iter, ckpt []time.Duration
	parent := r.scr.base
	for i := range b.N {
		t0 := time.Now()
		cmd := exec.Command("sh", "-c", jsTest)
		cmd.Dir = r.scr.tree
		cmd.Run() // the tests fail: that is the point of the loop
		host = append(host, time.Since(t0))

		change := fmt.Sprintf("exports.add = (a, b) => a + b + %d;\nexports.mul = (a, b) => a * b;\n", i)
		if err := r.svc.WriteFile(ctx, sb, Dir+"/calc.js", strings.NewReader(change)); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		commit, err := r.candidate(ctx, sb, parent, i+1)
		if err != nil {
			b.Fatal(err)
		}
		diff, err := r.scr.diff(ctx, r.scr.base, commit)
		if err != nil {
			b.Fatal(err)
		}
		if vs := guard.Check(diff, guard.Options{Policy: r.policy}); len(vs) > 0 {
			b.Fatal(vs)
		}
		if _, err := r.runTests(ctx, sb); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := r.snapshot(ctx, sb, i+1); err != nil {
			b.Fatal(err)
		}
		ckpt = append(ckpt, time.Since(t1))
		iter = append(iter, time.Since(t0))
		parent = commit
	}
	report(b, "host-test-", host)
	report(b, "sandbox-iter-", iter)
	report(b, "checkpoint-", ckpt)
	over := series.Series{Samples: iter}.Quantile(0.5) - series.Series{Samples: host}.Quantile(0.5)
	b.ReportMetric(float64(over.Microseconds())/1000, "overhead-p50-ms")
}

// BenchmarkAgentFlakyReruns runs the tests on 3 copies of the base
// checkpoint in parallel (what the runner does) and one after another.
func BenchmarkAgentFlakyReruns(b *testing.B) {
	const n = 3
	r, _ := benchRun(b)
	ctx := context.Background()
	var par, seq []time.Duration
	for range b.N {
		t0 := time.Now()
		if _, err := r.rerunBase(ctx, n, r.o.Test); err != nil {
			b.Fatal(err)
		}
		par = append(par, time.Since(t0))
		t0 = time.Now()
		for range n {
			sb, err := r.restore(ctx, r.baseSnap)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.runTests(ctx, sb); err != nil {
				b.Fatal(err)
			}
			r.remove(ctx, sb)
		}
		seq = append(seq, time.Since(t0))
	}
	report(b, "parallel-", par)
	report(b, "sequential-", seq)
}
